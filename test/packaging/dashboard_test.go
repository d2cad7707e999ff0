package packaging

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestDashboardQueriesSelectJobAndInstance: every query of the example Grafana dashboard
// (docs/grafana-dashboard.json) keeps to the job and instances chosen in its variables,
// so that a Prometheus scraping several crishim jobs (clusters, environments) shows
// the one chosen, not their sum.
func TestDashboardQueriesSelectJobAndInstance(t *testing.T) {
	b, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	if !vars["job"] || !vars["instance"] {
		t.Fatalf("dashboard variables %v, want job and instance", vars)
	}
	n := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			n++
			// Each selector of the query, not just one of them.
			for _, sel := range strings.Split(target.Expr, "{")[1:] {
				sel, _, _ = strings.Cut(sel, "}")
				if !strings.Contains(sel, `job=~"$job"`) || !strings.Contains(sel, `instance=~"$instance"`) {
					t.Errorf("panel %q: selector {%s} of %s ignores $job or $instance", p.Title, sel, target.Expr)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("dashboard has no queries")
	}
}
