package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadReportCountsItsAndFailedSuiteNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	report := `[{"RunTime": 2000000000, "SpecReports": [
		{"ContainerHierarchyTexts": ["[k8s.io] Image Manager"], "LeafNodeText": "pulls", "LeafNodeType": "It", "State": "passed"},
		{"ContainerHierarchyTexts": ["[k8s.io] Image Manager"], "LeafNodeText": "digest", "LeafNodeType": "It", "State": "failed", "Failure": {"Message": "failed to pull image\n  Unexpected error:\n\tno such host"}},
		{"ContainerHierarchyTexts": ["[k8s.io] NRI"], "LeafNodeText": "plugin", "LeafNodeType": "It", "State": "skipped"},
		{"LeafNodeText": "", "LeafNodeType": "It", "State": "timedout"},
		{"LeafNodeType": "BeforeSuite", "State": "passed"},
		{"LeafNodeType": "AfterSuite", "State": "panicked"}
	]}]`
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, f, s := res.count(passed), res.count(failed), res.count(skipped); p != 1 || f != 3 || s != 1 {
		t.Errorf("passed/failed/skipped = %d/%d/%d, want 1/3/1 (a timed-out It and a panicked AfterSuite fail)", p, f, s)
	}
	got := res.outcomes()["[k8s.io] Image Manager digest"]
	if got.Outcome != failed || got.Message != "failed to pull image Unexpected error: no such host" {
		t.Errorf("digest spec = %+v, want failed with its message on one line", got)
	}
	if res.RunTime.Seconds() != 2 {
		t.Errorf("run time %s", res.RunTime)
	}
}

func TestCompare(t *testing.T) {
	suite := func(outcomes ...outcome) suiteResult {
		var s suiteResult
		for i, o := range outcomes {
			s.Specs = append(s.Specs, specResult{Name: string(rune('a' + i)), Outcome: o})
		}
		return s
	}
	//                  a       b       c       d        e
	direct := suite(passed, passed, failed, failed, skipped)
	through := suite(passed, failed, passed, failed, failed)
	through.Specs = through.Specs[:4] // a spec missing through crishim that skipped directly is no regression
	c := compare(direct, through)
	names := func(specs []specResult) string {
		var b strings.Builder
		for _, s := range specs {
			b.WriteString(s.Name)
		}
		return b.String()
	}
	if names(c.Regressions) != "b" || names(c.Fixed) != "c" || names(c.BothFailed) != "d" {
		t.Errorf("regressions %q fixed %q both %q, want b, c, d", names(c.Regressions), names(c.Fixed), names(c.BothFailed))
	}
	missing := compare(suite(passed), suite())
	if len(missing.Regressions) != 1 {
		t.Errorf("a spec that passed directly and is missing through crishim is not a regression: %+v", missing)
	}
}
