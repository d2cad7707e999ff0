package packaging

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
)

const alertsDir = "../../packaging/prometheus"

// TestAlertRules checks the example alerting rules with Debian's promtool and runs their
// unit tests (crishim-alerts_test.yaml: each alert fires on its input series and stays
// quiet on healthy ones), and that every alert's runbook link names a section of
// docs/operations.md.
func TestAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("needs promtool (Debian's prometheus package)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := harness.EnsurePrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", "crishim-alerts.yaml"},
		{"test", "rules", "crishim-alerts_test.yaml"},
	} {
		cmd := exec.CommandContext(ctx, "promtool", args...)
		cmd.Dir = alertsDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules, err := os.ReadFile(alertsDir + "/crishim-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(string(rules), -1)
	runbooks := regexp.MustCompile(`(?m)^\s*runbook_url: \S+/docs/operations\.md#(\S+)$`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 || len(runbooks) != len(alerts) {
		t.Fatalf("%d alerts, %d runbook links to docs/operations.md: want one each", len(alerts), len(runbooks))
	}
	for i, a := range alerts {
		// A heading "### CrishimDown" is GitHub's anchor #crishimdown.
		if anchor := runbooks[i][1]; anchor != strings.ToLower(a[1]) {
			t.Errorf("alert %s links to #%s, want #%s", a[1], anchor, strings.ToLower(a[1]))
		}
		if !regexp.MustCompile(`(?m)^### ` + a[1] + `$`).Match(ops) {
			t.Errorf("docs/operations.md has no section \"### %s\" (the alert's runbook)", a[1])
		}
	}
}
