package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// outcome is a spec's result, ginkgo's states folded into three.
type outcome string

const (
	passed  outcome = "passed"
	failed  outcome = "failed"
	skipped outcome = "skipped"
)

// specResult is one spec of a run.
type specResult struct {
	Name    string
	Outcome outcome
	Message string // the start of the failure's message, on one line
}

// suiteResult is one critest run, read from its ginkgo JSON report.
type suiteResult struct {
	Specs   []specResult
	RunTime time.Duration
}

// ginkgoReport is the part of ginkgo v2's JSON report (types.Report) read here.
type ginkgoReport struct {
	RunTime     time.Duration
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		Failure                 struct{ Message string }
	}
}

// readReport reads a --ginkgo.json-report file. Specs count by their It; a failed suite node
// (BeforeSuite, AfterSuite, ...) counts as a failed spec of its own, since it fails the run.
func readReport(path string) (suiteResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return suiteResult{}, fmt.Errorf("read critest report: %w", err)
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(b, &reports); err != nil {
		return suiteResult{}, fmt.Errorf("parse critest report %s: %w", path, err)
	}
	var res suiteResult
	for _, r := range reports {
		res.RunTime += r.RunTime
		for _, s := range r.SpecReports {
			o := fold(s.State)
			name := strings.TrimSpace(strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " "))
			if s.LeafNodeType != "It" {
				if o != failed {
					continue
				}
				name = "[" + s.LeafNodeType + "] " + name
			}
			res.Specs = append(res.Specs, specResult{Name: name, Outcome: o, Message: oneLine(s.Failure.Message, 200)})
		}
	}
	return res, nil
}

// oneLine is the start of a failure message with its whitespace collapsed: gomega's messages
// begin with a line such as "Unexpected error:", and what the error was comes after it.
func oneLine(msg string, max int) string {
	s := strings.Join(strings.Fields(msg), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// fold maps ginkgo's spec states to an outcome: whatever did not pass and was not skipped
// (panicked, interrupted, aborted, timed out) failed.
func fold(state string) outcome {
	switch state {
	case "passed":
		return passed
	case "skipped", "pending":
		return skipped
	default:
		return failed
	}
}

func (s suiteResult) count(o outcome) int {
	n := 0
	for _, sp := range s.Specs {
		if sp.Outcome == o {
			n++
		}
	}
	return n
}

func (s suiteResult) outcomes() map[string]specResult {
	m := make(map[string]specResult, len(s.Specs))
	for _, sp := range s.Specs {
		m[sp.Name] = sp
	}
	return m
}

// comparison sorts the specs by how the two runs differ.
type comparison struct {
	Regressions []specResult // passed directly, not through crishim: these fail the run
	Fixed       []specResult // failed directly, passed through crishim
	BothFailed  []specResult // failed either way (the direct failure is shown)
}

func compare(direct, crishim suiteResult) comparison {
	var c comparison
	through := crishim.outcomes()
	for _, d := range direct.Specs {
		t, ok := through[d.Name]
		switch {
		case !ok:
			// A spec in one run only (the runs filter alike): count it as not passing.
			if d.Outcome == passed {
				c.Regressions = append(c.Regressions, specResult{Name: d.Name, Outcome: failed, Message: "missing from the run through crishim"})
			}
		case d.Outcome == passed && t.Outcome == failed:
			c.Regressions = append(c.Regressions, t)
		case d.Outcome == failed && t.Outcome == passed:
			c.Fixed = append(c.Fixed, d)
		case d.Outcome == failed && t.Outcome == failed:
			c.BothFailed = append(c.BothFailed, d)
		}
	}
	return c
}

// printReport writes the table and the lists of specs whose outcome matters.
func printReport(w io.Writer, title string, direct, crishim suiteResult, c comparison) {
	fmt.Fprintf(w, "\n%s\n", title)
	fmt.Fprintf(w, "%-8s %7s %7s %8s %9s\n", "target", "passed", "failed", "skipped", "time")
	for _, row := range []struct {
		name string
		s    suiteResult
	}{{"direct", direct}, {"crishim", crishim}} {
		fmt.Fprintf(w, "%-8s %7d %7d %8d %9s\n", row.name, row.s.count(passed), row.s.count(failed), row.s.count(skipped), row.s.RunTime.Round(time.Second))
	}
	list := func(heading string, specs []specResult) {
		fmt.Fprintf(w, "\n%s: %d\n", heading, len(specs))
		for _, s := range specs {
			fmt.Fprintf(w, "  %s\n", s.Name)
			if s.Message != "" {
				fmt.Fprintf(w, "      %s\n", s.Message)
			}
		}
	}
	list("passed directly, failed through crishim", c.Regressions)
	list("failed directly, passed through crishim", c.Fixed)
	list("failed both ways", c.BothFailed)
}
