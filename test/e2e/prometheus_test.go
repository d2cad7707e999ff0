package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/harness"
)

// TestPrometheusScrapesCrishim: a real Prometheus scrapes crishim in front of
// the private containerd; PromQL sees the calls made, per method and code,
// and the latency histogram; promtool finds nothing wrong with the output.
func TestPrometheusScrapesCrishim(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prom, err := harness.StartPrometheus(ctx, t.TempDir(), []string{d.Metrics})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()

	// A plain gRPC client, so the counts are exactly the calls made here
	// (cri-client adds calls of its own when it connects).
	conn, err := grpc.NewClient(d.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	for range 5 {
		if _, err := rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "no-such-container"}); err == nil {
			t.Fatal("ContainerStatus of an unknown container succeeded")
		}
	}

	const crs = "/runtime.v1.RuntimeService/"
	want := map[string]string{
		`crishim_grpc_requests_total{method="` + crs + `Version",code="OK"}`:                       "5",
		`crishim_grpc_requests_total{method="` + crs + `ListContainers",code="OK"}`:                "3",
		`crishim_grpc_requests_total{method="` + crs + `ContainerStatus",code="NotFound"}`:         "2",
		`crishim_grpc_request_duration_seconds_count{method="` + crs + `Version"}`:                 "5",
		`sum(crishim_grpc_request_duration_seconds_bucket{method="` + crs + `Version",le="+Inf"})`: "5",
		`crishim_runtime_up{backend="runtime"}`:                                                    "1",
		`up{job="crishim"}`:                                                                        "1",
	}
	for query, value := range want {
		eventually(t, "PromQL "+query, func() error {
			res, err := prom.Query(ctx, query)
			if err != nil {
				return err
			}
			if len(res) != 1 {
				return fmt.Errorf("%d series: %v", len(res), res)
			}
			for _, v := range res {
				if v != value {
					return fmt.Errorf("= %s, want %s", v, value)
				}
			}
			return nil
		})
	}
	// The histogram has observations below its top bucket, so quantiles are real numbers.
	res, err := prom.Query(ctx, `histogram_quantile(0.5, sum by (le) (crishim_grpc_request_duration_seconds_bucket{method="`+crs+`Version"}))`)
	if err != nil || len(res) != 1 {
		t.Fatalf("median latency: %v, %v", res, err)
	}
	for _, v := range res {
		if v == "NaN" || v == "+Inf" {
			t.Errorf("median Version latency = %s", v)
		}
	}

	// Every query of the example dashboard must be valid PromQL over
	// metrics crishim really exports.
	// Rates need two scrapes, hence the polling. The error and reconnect
	// panels may rightly be empty here.
	for _, q := range dashboardQueries(t) {
		mayBeEmpty := strings.Contains(q, `code=~`) || strings.Contains(q, "reconnects")
		eventually(t, "dashboard query "+q, func() error {
			res, err := prom.Query(ctx, q)
			if err == nil && len(res) == 0 && !mayBeEmpty {
				err = fmt.Errorf("no series")
			}
			return err
		})
	}

	scrape := metricsText(t, d.Metrics)
	check := exec.CommandContext(ctx, "promtool", "check", "metrics")
	check.Stdin = strings.NewReader(scrape)
	if out, err := check.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// dashboardQueries reads docs/grafana-dashboard.json and fills in Grafana's
// variables the way a dashboard showing every instance would.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	fill := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$job", ".*")
	var qs []string
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			qs = append(qs, fill.Replace(target.Expr))
		}
	}
	if len(qs) == 0 {
		t.Fatal("dashboard has no queries")
	}
	return qs
}
