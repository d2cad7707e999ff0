package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Prometheus is a private Prometheus server (Debian's package) on loopback that scrapes
// the given targets every second, for tests of what operators see.
type Prometheus struct {
	URL string // http://127.0.0.1:PORT
	cmd *exec.Cmd
	log string
}

// StartPrometheus runs Prometheus with its config and data under dir, scraping each
// host:port target's /metrics as job "crishim", and waits until it is ready.
func StartPrometheus(ctx context.Context, dir string, targets []string) (*Prometheus, error) {
	if err := EnsurePrometheus(ctx); err != nil {
		return nil, err
	}
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = fmt.Sprintf("%q", t)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: crishim
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("prometheus config: %w", err)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	p := &Prometheus{URL: "http://" + addr, log: filepath.Join(dir, "prometheus.log")}
	logFile, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	p.cmd = exec.Command(binary("prometheus"),
		"--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		// Debian's default console paths may be absent with --no-install-recommends.
		"--web.console.templates="+dir, "--web.console.libraries="+dir)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	err = poll(ctx, 30*time.Second, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		p.Stop()
		out, _ := os.ReadFile(p.log)
		return nil, fmt.Errorf("prometheus not ready: %w\n%s", err, tail(out, 2048))
	}
	return p, nil
}

// Query runs an instant PromQL query and returns each resulting sample's value, keyed
// by its labels (rendered as {k="v",...}).
func (p *Prometheus) Query(ctx context.Context, query string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", query, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: decode: %w", query, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", query, body.Error)
	}
	out := map[string]string{}
	for _, r := range body.Data.Result {
		var labels []string
		for k, v := range r.Metric {
			labels = append(labels, fmt.Sprintf("%s=%q", k, v))
		}
		slices.Sort(labels)
		v, _ := r.Value[1].(string)
		out["{"+strings.Join(labels, ",")+"}"] = v
	}
	return out, nil
}

// Stop kills Prometheus; its data dir goes with the caller's dir.
func (p *Prometheus) Stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// freeLoopbackAddr picks a free loopback port. Prometheus cannot report a port it chose
// itself, so there is a small window in which another process could take it.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
