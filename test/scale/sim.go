package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	notifnode "github.com/crishim/crishim/notification/node"
	"github.com/crishim/crishim/shim/crishimv1"
	"github.com/crishim/crishim/test/node"
)

// stats counts what the simulated nodes send and receive, at their HTTP transport.
type stats struct {
	inject   float64
	writes   atomic.Int64 // POST, PUT, PATCH, DELETE
	events   atomic.Int64 // watch events received (one JSON object per line), bookmarks included
	marks    atomic.Int64 // of which bookmarks: one a minute per watch, Notification or not
	timeouts atomic.Int64 // 504s answered (injected ones included)
	refused  atomic.Int64 // 4xx answers to writes other than 409 conflicts
	conflict atomic.Int64 // 409 answers to writes
	injected atomic.Int64
	n        atomic.Int64

	mu     sync.Mutex
	byCode map[string]int // "<METHOD> <code>[ <reason>]" of answers other than 2xx
}

func (s *stats) reset() {
	s.writes.Store(0)
	s.events.Store(0)
	s.marks.Store(0)
	s.timeouts.Store(0)
	s.refused.Store(0)
	s.conflict.Store(0)
	s.mu.Lock()
	s.byCode = nil
	s.mu.Unlock()
}

func (s *stats) answer(req *http.Request, code int) {
	if code < 300 {
		return
	}
	what := req.Method
	if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
		what = "WATCH"
	}
	k := fmt.Sprintf("%s-%d", what, code)
	s.mu.Lock()
	if s.byCode == nil {
		s.byCode = map[string]int{}
	}
	s.byCode[k]++
	s.mu.Unlock()
}

func (s *stats) wrap(rt http.RoundTripper) http.RoundTripper { return &counting{rt: rt, s: s} }

type counting struct {
	rt http.RoundTripper
	s  *stats
}

func (c *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	write := req.Method != http.MethodGet && req.Method != http.MethodHead
	if write {
		c.s.writes.Add(1)
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		c.s.answer(req, 999) // no answer: a transport error
		return resp, err
	}
	c.s.answer(req, resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusGatewayTimeout:
		c.s.timeouts.Add(1)
	case write && resp.StatusCode == http.StatusConflict:
		c.s.conflict.Add(1)
		if c.s.conflict.Load() == 1 && os.Getenv("SCALE_DEBUG") != "" {
			fmt.Fprintln(os.Stderr, "scale: first conflict:", req.Method, req.URL.Path)
		}
	case write && resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict:
		c.s.refused.Add(1)
	}
	if write && resp.StatusCode < 300 && req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/status") && c.s.inject > 0 {
		// A write that lands but whose answer is a timeout: every 1/inject-th status write.
		if k := c.s.n.Add(1); float64(k)*c.s.inject >= float64(c.s.injected.Load()+1) {
			c.s.injected.Add(1)
			c.s.timeouts.Add(1)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Timeout: request did not complete within the allotted timeout","reason":"Timeout","code":504}`
			return &http.Response{StatusCode: http.StatusGatewayTimeout, Status: "504 Gateway Timeout", Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
		}
	}
	if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
		resp.Body = &eventCounter{ReadCloser: resp.Body, s: c.s}
	}
	return resp, nil
}

// eventCounter counts watch events in a JSON watch stream: one object per line.
type eventCounter struct {
	io.ReadCloser
	s *stats
}

func (e *eventCounter) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	e.s.events.Add(int64(bytes.Count(p[:n], []byte("\n"))))
	// Each event is a line {"type":"BOOKMARK",...}; a read ending inside the marker
	// misses one, rarely.
	e.s.marks.Add(int64(bytes.Count(p[:n], []byte(`{"type":"BOOKMARK"`))))
	return n, err
}

// fakeCRI is a node's pod list.
type fakeCRI struct {
	runtimeapi.RuntimeServiceClient // only ListPodSandbox is called
	pods                            []*runtimeapi.PodSandbox
}

func (f fakeCRI) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: f.pods}, nil
}

// fakeNotifier succeeds after 5 ms, or fails in the pods named failing.
type fakeNotifier struct{ failing map[string]bool }

func (f fakeNotifier) Notify(ctx context.Context, req *crishimv1.NotifyRequest) (*crishimv1.NotifyResponse, error) {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	uid := strings.TrimPrefix(req.GetPodSandboxId(), "sb-")
	c := &crishimv1.ContainerNotification{ContainerName: "main", Succeeded: !f.failing[uid]}
	if f.failing[uid] {
		c.Error = &crishimv1.NotificationError{Type: "Error", Reason: "ActionFailed", Message: "exit status 3: disk full"}
	}
	return &crishimv1.NotifyResponse{Pods: []*crishimv1.PodNotification{{PodSandboxId: req.GetPodSandboxId(), Containers: []*crishimv1.ContainerNotification{c}}}}, nil
}

// createPods creates perNode pods bound to each node in the apiserver, and returns each
// node's CRI view of them.
func createPods(ctx context.Context, kube kubernetes.Interface, app string, nodes []string, perNode int) (map[string][]*runtimeapi.PodSandbox, error) {
	out := map[string][]*runtimeapi.PodSandbox{}
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	ann := map[string]string{"notifier.crishim.io/main.quiesce": `{"exec":["true"]}`}
	for _, nm := range nodes {
		for j := range perNode {
			g.Go(func() error {
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", nm, j), Namespace: "default", Labels: map[string]string{"app": app}, Annotations: ann},
					Spec: corev1.PodSpec{NodeName: nm, AutomountServiceAccountToken: new(bool),
						Containers: []corev1.Container{{Name: "main", Image: node.BusyboxLatest}}},
				}
				got, err := kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				sb := &runtimeapi.PodSandbox{Id: "sb-" + string(got.UID), State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: got.Labels, Annotations: ann,
					Metadata: &runtimeapi.PodSandboxMetadata{Name: got.Name, Namespace: got.Namespace, Uid: string(got.UID)}}
				mu.Lock()
				out[nm] = append(out[nm], sb)
				mu.Unlock()
				return nil
			})
		}
	}
	return out, g.Wait()
}

// cpu is the CPU seconds (user+system) of the apiserver and of etcd so far.
func cpu(cp *node.Node) [2]float64 {
	var out [2]float64
	for i, name := range []string{"kube-apiserver", "etcd"} {
		for _, pid := range cp.PIDs(name) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			// Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
			u, _ := strconv.ParseFloat(f[11], 64)
			s, _ := strconv.ParseFloat(f[12], 64)
			out[i] += (u + s) / 100 // USER_HZ
		}
	}
	return out
}

// startPaced starts the nodes, at most parallel of them establishing their watch at once,
// and returns when every one has synced (its first watch-list is in).
func startPaced(ctx context.Context, nodes []*notifnode.Controller, parallel int, start func(*notifnode.Controller)) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, c := range nodes {
		g.Go(func() error {
			start(c)
			// Polls the informer's flag, as cache.WaitForCacheSync does.
			return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) { return c.HasSynced(), nil })
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("nodes establishing their watches: %w", err)
	}
	return nil
}

// profile writes a CPU profile of the apiserver, taken over d, to dir/name.pprof (the
// apiserver runs with --profiling; the admin identity may read /debug/pprof).
func profile(ctx context.Context, kube kubernetes.Interface, dir, name string, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	b, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(d.Seconds()))).DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".pprof"), b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale: profile %s: %v\n", name, err)
	}
}

// goroutines writes the apiserver's goroutines, grouped by stack, to dir/name.txt: where
// the watch cache's watchers wait (for an event, or on a client that does not read).
func goroutines(ctx context.Context, kube kubernetes.Interface, dir, name string) {
	b, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/goroutine").Param("debug", "1").DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".txt"), b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale: goroutines %s: %v\n", name, err)
	}
}

// selfCPU is this process's CPU seconds so far: the simulated nodes and the aggregator.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// codes lists the answers other than 2xx the nodes got, by method and status code.
func (s *stats) codes() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byCode) == 0 {
		return "answers: all 2xx"
	}
	keys := make([]string, 0, len(s.byCode))
	for k := range s.byCode {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("answers other than 2xx:")
	for _, k := range keys {
		fmt.Fprintf(&b, " %s×%d", k, s.byCode[k])
	}
	return b.String()
}

// apiserverCounters reads from the apiserver's /metrics the watchers it closed for falling
// behind (apiserver_terminated_watchers_total) and the requests APF refused
// (apiserver_flowcontrol_rejected_requests_total), summed over their labels.
func apiserverCounters(ctx context.Context, kube kubernetes.Interface) (terminated, rejected float64) {
	b, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(f[0], "apiserver_terminated_watchers_total{"):
			terminated += v
		case strings.HasPrefix(f[0], "apiserver_flowcontrol_rejected_requests_total{"):
			rejected += v
		}
	}
	return terminated, rejected
}
