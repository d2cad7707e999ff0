package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestHelpSections: --help heads each section once, and lists every flag
// crishim accepts once, in some section; hidden flags in none.
func TestHelpSections(t *testing.T) {
	opts := newRootOptions()
	root := newRootCommand(opts)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, name := range opts.sections.Order {
		if n := strings.Count(help, "\n"+name+" flags:\n"); n != 1 {
			t.Errorf("section %q headed %d times, want once", name, n)
		}
	}
	listed := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^(?:  -\w, |      )--([a-z0-9-]+)`).FindAllStringSubmatch(help, -1) {
		listed[m[1]]++
	}
	// Removed in 0.2.0 (config_test.go checks the message that says so).
	if f := root.Flags().Lookup("notification-gc-after"); f != nil || listed["notification-gc-after"] != 0 {
		t.Errorf("--notification-gc-after: want it gone, listed %d times", listed["notification-gc-after"])
	}
	// After Execute, root's flags hold the persistent ones too.
	root.Flags().VisitAll(func(f *pflag.Flag) {
		want := 1
		if f.Hidden {
			want = 0
		}
		if listed[f.Name] != want {
			t.Errorf("--%s listed %d times, want %d", f.Name, listed[f.Name], want)
		}
		delete(listed, f.Name)
	})
	for name := range listed {
		t.Errorf("--help lists --%s, which crishim does not accept", name)
	}
	if t.Failed() {
		t.Logf("--help:\n%s", help)
	}
}

// TestFlagsDocFollowsSections: docs/flags.md has a "## NAME flags" table
// for each section of --help, in its order, whose rows are the section's
// flags: a flag added, moved or hidden without the doc fails here.
func TestFlagsDocFollowsSections(t *testing.T) {
	doc, err := os.ReadFile("../../docs/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	opts := newRootOptions()
	newRootCommand(opts) // declares --config, --version and --help
	var docOrder []string
	documented := map[string][]string{} // section: its table's flags
	current := ""
	flagName := regexp.MustCompile(`--[a-z0-9-]+`)
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			current = ""
			if name, ok := strings.CutSuffix(strings.TrimPrefix(line, "## "), " flags"); ok {
				current = name
				docOrder = append(docOrder, name)
			}
		case current != "" && strings.HasPrefix(line, "| `--"):
			first := strings.SplitN(line, " | ", 2)[0]
			for _, f := range flagName.FindAllString(first, -1) {
				documented[current] = append(documented[current], strings.TrimPrefix(f, "--"))
			}
		}
	}
	if !slices.Equal(docOrder, opts.sections.Order) {
		t.Errorf("docs/flags.md sections %q, want those of --help: %q", docOrder, opts.sections.Order)
	}
	for _, name := range opts.sections.Order {
		var want []string
		opts.sections.FlagSets[name].VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				want = append(want, f.Name)
			}
		})
		got := documented[name]
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("docs/flags.md %q flags: %q, want %q", name, got, want)
		}
	}
}
