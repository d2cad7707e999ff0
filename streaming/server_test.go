package streaming

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
)

// fakeRuntime answers the three calls with the URL of an upgrade backend
// (or an error) and counts the calls, to prove what never reached it.
type fakeRuntime struct {
	url   string
	err   error
	calls atomic.Int32
}

func (f *fakeRuntime) answer() (string, error) {
	f.calls.Add(1)
	return f.url, f.err
}

func (f *fakeRuntime) Exec(context.Context, *runtimeapi.ExecRequest, ...grpc.CallOption) (*runtimeapi.ExecResponse, error) {
	u, err := f.answer()
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecResponse{Url: u + "/exec/runtime-token"}, nil
}

func (f *fakeRuntime) Attach(context.Context, *runtimeapi.AttachRequest, ...grpc.CallOption) (*runtimeapi.AttachResponse, error) {
	u, err := f.answer()
	if err != nil {
		return nil, err
	}
	return &runtimeapi.AttachResponse{Url: u + "/attach/runtime-token"}, nil
}

func (f *fakeRuntime) PortForward(context.Context, *runtimeapi.PortForwardRequest, ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error) {
	u, err := f.answer()
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PortForwardResponse{Url: u + "/portforward/runtime-token"}, nil
}

// echoBackend is a runtime stream server reduced to its transport: it
// upgrades any request to protocol "echo" and echoes bytes, until told to
// drop its connections. gone is closed when a connection ends at its side.
type echoBackend struct {
	*httptest.Server
	mu    sync.Mutex
	conns []net.Conn
	paths []string
	gone  chan struct{}
}

func newEchoBackend(t *testing.T) *echoBackend {
	b := &echoBackend{gone: make(chan struct{}, 16)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.paths = append(b.paths, r.Method+" "+r.URL.Path)
		b.mu.Unlock()
		fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(c, rw)
		_ = c.Close()
		b.gone <- struct{}{}
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *echoBackend) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
}

type testServer struct {
	*Server
	rt      *fakeRuntime
	backend *echoBackend
	reg     *prometheus.Registry
	served  chan error
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startServerWith(t, cfg, Deps{})
}

// startServerWith is startServer with d's optional dependencies (audit,
// record errors, the idle timeout); it fills the runtime, metrics and log.
func startServerWith(t *testing.T, cfg Config, d Deps) *testServer {
	t.Helper()
	backend := newEchoBackend(t)
	rt := &fakeRuntime{url: backend.URL}
	reg := prometheus.NewRegistry()
	m := metrics.NewStreaming(reg)
	d.Runtime, d.Metrics, d.Log = rt, m, slog.New(slog.DiscardHandler)
	s, err := Listen(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, rt: rt, backend: backend, reg: reg, served: make(chan error, 1)}
	go func() { ts.served <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // cut at once: the tests end their own streams
		_ = s.Shutdown(ctx)
		<-ts.served
	})
	return ts
}

func testConfig() Config {
	c := DefaultConfig()
	c.Address = "127.0.0.1:0"
	return c
}

// upgrade sends an upgrade request for path and returns the connection once
// answered, with the response.
func upgrade(t *testing.T, addr, method, path string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	return upgradeTo(t, addr, method, path, "echo")
}

// upgradeTo is upgrade asking for protocol (the echo backend answers echo
// whatever it is asked).
func upgradeTo(t *testing.T, addr, method, path, protocol string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measurement
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", method, path, addr, protocol)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, br, resp
}

func pathOf(t *testing.T, rawURL string) string {
	t.Helper()
	_, rest, ok := strings.Cut(strings.TrimPrefix(rawURL, "http://"), "/")
	if !ok {
		t.Fatalf("URL %q has no path", rawURL)
	}
	return "/" + rest
}

func TestURLsAreAbsoluteOnTheBoundAddress(t *testing.T) {
	s := startServer(t, testConfig())
	for _, k := range Kinds {
		u, err := s.Issue(k, &runtimeapi.ExecRequest{})
		if err != nil {
			t.Fatal(err)
		}
		want := "http://" + s.Addr() + "/" + string(k) + "/"
		if !strings.HasPrefix(u, want) || len(u) <= len(want) {
			t.Errorf("%s URL %q, want %q + token", k, u, want)
		}
	}
}

func TestStreamIsProxiedToTheRuntimeURL(t *testing.T) {
	s := startServer(t, testConfig())
	for _, method := range []string{http.MethodPost, http.MethodGet} { // SPDY, WebSocket
		u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		c, br, resp := upgrade(t, s.Addr(), method, pathOf(t, u))
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
			t.Fatalf("%s: upgrade answered %s %v", method, resp.Status, resp.Header)
		}
		fmt.Fprint(c, "ping\n")
		line, err := br.ReadString('\n')
		if err != nil || line != "ping\n" {
			t.Fatalf("%s: echo %q, %v", method, line, err)
		}
		_ = c.Close()
		<-s.backend.gone // the client left: the runtime side is closed too
	}
	if got := s.backend.paths; len(got) != 2 || got[0] != "POST /exec/runtime-token" || got[1] != "GET /exec/runtime-token" {
		t.Errorf("runtime stream server saw %q", got)
	}
	if got := metricValue(t, s.reg, "crishim_stream_sessions_total", "exec"); got != 2 {
		t.Errorf("sessions_total{exec} = %v, want 2", got)
	}
	waitFor(t, "no active session", func() bool {
		return metricValue(t, s.reg, "crishim_stream_sessions_active", "exec") == 0
	})
	if got := metricValue(t, s.reg, "crishim_stream_bytes_total", "to_client", "exec"); got < 5 {
		t.Errorf("bytes to client = %v, want the echo counted", got)
	}
}

func TestRefusalsNeverReachTheRuntime(t *testing.T) {
	s := startServer(t, testConfig())
	used, err := s.Issue(Exec, &runtimeapi.ExecRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c, _, resp := upgrade(t, s.Addr(), http.MethodPost, pathOf(t, used))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("first use: %s", resp.Status)
	}
	_ = c.Close()
	calls := s.rt.calls.Load()
	fresh, err := s.Issue(Attach, &runtimeapi.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Issue(Exec, &runtimeapi.ExecRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path string
		upgrade            bool
		want               int
	}{
		{"used token", http.MethodPost, pathOf(t, used), true, http.StatusNotFound},
		{"unknown token", http.MethodPost, "/exec/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", true, http.StatusNotFound},
		{"unknown kind", http.MethodPost, "/shell/" + strings.TrimPrefix(pathOf(t, fresh), "/attach/"), true, http.StatusNotFound},
		{"wrong method", http.MethodPut, pathOf(t, fresh), true, http.StatusMethodNotAllowed},
		{"token of another kind", http.MethodPost, "/portforward/" + strings.TrimPrefix(pathOf(t, fresh), "/attach/"), true, http.StatusNotFound},
		{"no upgrade", http.MethodPost, pathOf(t, plain), false, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://"+s.Addr()+tt.path, nil)
			if tt.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "echo")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("%s %s: %s, want %d", tt.method, tt.path, resp.Status, tt.want)
			}
			if tt.want == http.StatusMethodNotAllowed && !strings.Contains(resp.Header.Get("Allow"), "POST") {
				t.Errorf("405 without Allow: %v", resp.Header)
			}
		})
	}
	if got := s.rt.calls.Load(); got != calls {
		t.Errorf("runtime asked %d more times for refused requests", got-calls)
	}
}

func TestRuntimeErrorsMapToHTTP(t *testing.T) {
	tests := []struct {
		err        error
		want       int
		retryAfter string
	}{
		{status.Error(codes.NotFound, "container gone"), http.StatusNotFound, ""},
		{status.Error(codes.ResourceExhausted, "runtime full"), http.StatusTooManyRequests, "60"},
		{status.Error(codes.Unavailable, "runtime down"), http.StatusServiceUnavailable, ""},
		{status.Error(codes.FailedPrecondition, "not running"), http.StatusInternalServerError, ""},
	}
	s := startServer(t, testConfig())
	for _, tt := range tests {
		t.Run(status.Code(tt.err).String(), func(t *testing.T) {
			s.rt.err = tt.err
			u, err := s.Issue(Exec, &runtimeapi.ExecRequest{})
			if err != nil {
				t.Fatal(err)
			}
			_, _, resp := upgrade(t, s.Addr(), http.MethodPost, pathOf(t, u))
			if resp.StatusCode != tt.want || resp.Header.Get("Retry-After") != tt.retryAfter {
				t.Fatalf("%v: %s Retry-After %q, want %d %q", tt.err, resp.Status, resp.Header.Get("Retry-After"), tt.want, tt.retryAfter)
			}
		})
	}
}

func TestRuntimeGoneMidStream(t *testing.T) {
	s := startServer(t, testConfig())
	u, _ := s.Issue(PortForward, &runtimeapi.PortForwardRequest{})
	c, br, resp := upgrade(t, s.Addr(), http.MethodPost, pathOf(t, u))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatal(resp.Status)
	}
	s.backend.drop()
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("client still connected after the runtime went away")
	}
	_ = c.Close()
	// crishim keeps serving.
	u, _ = s.Issue(PortForward, &runtimeapi.PortForwardRequest{})
	c, br, resp = upgrade(t, s.Addr(), http.MethodPost, pathOf(t, u))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("after a runtime failure: %s", resp.Status)
	}
	fmt.Fprint(c, "again\n")
	if line, err := br.ReadString('\n'); line != "again\n" {
		t.Fatalf("echo after a runtime failure: %q %v", line, err)
	}
}

func TestShutdownCutsOpenStreams(t *testing.T) {
	s := startServer(t, testConfig())
	u, _ := s.Issue(Attach, &runtimeapi.AttachRequest{})
	_, br, resp := upgrade(t, s.Addr(), http.MethodPost, pathOf(t, u))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatal(resp.Status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shutdown timeout is over before it starts
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("stream survived the shutdown")
	}
	<-s.backend.gone
	if err := <-s.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	s.served <- nil // for the cleanup
	if s.Ready(context.Background()) == nil {
		t.Error("ready after shutdown")
	}
}

func TestCacheFullIsResourceExhausted(t *testing.T) {
	cfg := testConfig()
	cfg.MaxTokens = 1
	s := startServer(t, cfg)
	if _, err := s.Issue(Exec, &runtimeapi.ExecRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Issue(Exec, &runtimeapi.ExecRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--stream-max-tokens") {
		t.Fatalf("second token: %v", err)
	}
	if got := metricValue(t, s.reg, "crishim_stream_tokens_rejected_total", "exec", "full"); got != 1 {
		t.Errorf("rejected{full} = %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"localhost", func(c *Config) { c.Address = "localhost:0" }, ""},
		{"ipv6 loopback", func(c *Config) { c.Address = "[::1]:10010" }, ""},
		{"wildcard without TLS", func(c *Config) { c.Address = "0.0.0.0:10010" }, "not loopback"},
		{"empty host without TLS", func(c *Config) { c.Address = ":10010" }, "not loopback"},
		{"node IP without TLS", func(c *Config) { c.Address = "10.1.2.3:10010" }, "--streaming-allow-insecure"},
		{"node IP allowed insecure", func(c *Config) { c.Address = "10.1.2.3:10010"; c.AllowInsecure = true }, ""},
		{"node IP with TLS", func(c *Config) { c.Address = "10.1.2.3:10010"; c.TLSCertFile, c.TLSKeyFile = "c", "k" }, ""},
		{"cert without key", func(c *Config) { c.TLSCertFile = "c" }, "go together"},
		{"no port", func(c *Config) { c.Address = "127.0.0.1" }, "--streaming-address"},
		{"bad port", func(c *Config) { c.Address = "127.0.0.1:http" }, "port"},
		{"zero TTL", func(c *Config) { c.TokenTTL = 0 }, "--stream-token-ttl"},
		{"zero max", func(c *Config) { c.MaxTokens = 0 }, "--stream-max-tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestWildcardBindAdvertisesARoutableHost(t *testing.T) {
	cfg := testConfig()
	cfg.Address = "0.0.0.0:0"
	cfg.AllowInsecure = true
	s, err := Listen(cfg, Deps{Runtime: &fakeRuntime{}, Metrics: metrics.NewStreaming(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		if strings.Contains(err.Error(), "no routable address") {
			t.Skipf("this machine has no default route: %v", err)
		}
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(s.BaseURL(), "http://"))
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		t.Fatalf("base URL %s: want a concrete IP", s.BaseURL())
	}
}

// waitFor polls cond; it guards against a hang, it measures nothing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metricValue reads one series from reg; labels are the values in the
// alphabetical order of the label names, as Gather sorts them.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetValue() != labels[i] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestListenWithoutRequiredDepsFails: a server made without its runtime,
// metrics or log would panic at the first token or session; Listen says
// so at startup instead.
func TestListenWithoutRequiredDepsFails(t *testing.T) {
	full := Deps{Runtime: &fakeRuntime{}, Metrics: metrics.NewStreaming(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler)}
	for name, drop := range map[string]func(*Deps){
		"Runtime": func(d *Deps) { d.Runtime = nil },
		"Metrics": func(d *Deps) { d.Metrics = nil },
		"Log":     func(d *Deps) { d.Log = nil },
	} {
		t.Run(name, func(t *testing.T) {
			d := full
			drop(&d)
			s, err := Listen(testConfig(), d)
			if err == nil {
				_ = s.Shutdown(context.Background())
				t.Fatal("Listen accepted Deps without " + name)
			}
			if !strings.Contains(err.Error(), "Deps."+name+" ") {
				t.Fatalf("Listen: %v; want the error to name %s", err, name)
			}
		})
	}
}
