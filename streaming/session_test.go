package streaming

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{d, a} {
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measurement
	}
	return d.(*net.TCPConn), a.(*net.TCPConn)
}

func testSession(t *testing.T) (*session, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	m := metrics.NewStreaming(reg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &session{kind: Exec, ctx: ctx, cancel: cancel, m: m.SessionStarted(string(Exec)), start: time.Now(), clientEnded: make(chan struct{})}, reg
}

// proxyCopies copies between client and runtime as the upgrade-aware proxy
// does once upgraded, and returns when both directions have ended.
func proxyCopies(client, runtime net.Conn) func() {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(runtime, client)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, runtime)
	}()
	return wg.Wait
}

// writeAndRead writes n bytes to from and reads them back at to.
func writeAndRead(t *testing.T, from, to net.Conn, n int) {
	t.Helper()
	want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
	go func() { _, _ = from.Write(want) }()
	got := make([]byte, n)
	if _, err := io.ReadFull(to, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes came out changed")
	}
}

// noCopyMethods hides the ReadFrom and WriteTo of *net.TCPConn, as a
// *tls.Conn has none.
type noCopyMethods struct{ net.Conn }

func TestCountingConnCountsWhileCopying(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"tcp", func(c net.Conn) net.Conn { return c }},
		{"client without ReadFrom or WriteTo", func(c net.Conn) net.Conn { return noCopyMethods{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, reg := testSession(t)
			client, proxyClient := tcpPair(t)
			proxyRuntime, runtime := tcpPair(t)
			wait := proxyCopies(tc.wrap(proxyClient), &countingConn{Conn: proxyRuntime, sess: sess})

			const up, down = 2<<20 + 7, 3<<20 + 5
			writeAndRead(t, client, runtime, up)
			writeAndRead(t, runtime, client, down)
			// Whole chunks are counted while the stream is open.
			waitFor(t, "the counts of a stream still open", func() bool {
				return sess.toRuntime.Load() >= up-countChunk && sess.toClient.Load() >= down-countChunk
			})

			_ = client.CloseWrite()
			_ = runtime.CloseWrite()
			wait()
			if got := sess.toRuntime.Load(); got != up {
				t.Errorf("bytes to runtime = %d, want %d", got, up)
			}
			if got := sess.toClient.Load(); got != down {
				t.Errorf("bytes to client = %d, want %d", got, down)
			}
			if got := metricValue(t, reg, "crishim_stream_bytes_total", "to_runtime", "exec"); got != up {
				t.Errorf("bytes_total{to_runtime} = %v, want %d", got, up)
			}
			if got := metricValue(t, reg, "crishim_stream_bytes_total", "to_client", "exec"); got != down {
				t.Errorf("bytes_total{to_client} = %v, want %d", got, down)
			}
		})
	}
}

// readFromProbe records what its ReadFrom is handed.
type readFromProbe struct {
	*net.TCPConn
	got chan io.Reader
}

func (p readFromProbe) ReadFrom(r io.Reader) (int64, error) {
	select {
	case p.got <- r:
	default:
	}
	return p.TCPConn.ReadFrom(r)
}

// net splices only from a TCP (or Unix) connection itself, or an
// *io.LimitedReader over one: that is what each side's ReadFrom must see.
func TestCountingConnLeavesTheCopyToTheConnections(t *testing.T) {
	sess, _ := testSession(t)
	client, proxyClient := tcpPair(t)
	proxyRuntime, runtime := tcpPair(t)
	toClient := readFromProbe{TCPConn: proxyClient, got: make(chan io.Reader, 1)}
	toRuntime := readFromProbe{TCPConn: proxyRuntime, got: make(chan io.Reader, 1)}
	cc := &countingConn{Conn: toRuntime, sess: sess}
	wait := proxyCopies(toClient, cc)

	writeAndRead(t, client, runtime, 10)
	writeAndRead(t, runtime, client, 10)
	for _, tc := range []struct {
		dir   string
		got   chan io.Reader
		check func(io.Reader) bool
	}{
		{"to the runtime", toRuntime.got, func(r io.Reader) bool {
			c, ok := r.(net.Conn) // net's own wrapper of the client connection
			return ok && c.LocalAddr().String() == proxyClient.LocalAddr().String()
		}},
		{"to the client", toClient.got, func(r io.Reader) bool { return r == cc.Conn }},
	} {
		var r io.Reader
		select {
		case r = <-tc.got:
		default:
			t.Errorf("copy %s: ReadFrom never called", tc.dir)
			continue
		}
		lr, ok := r.(*io.LimitedReader)
		if !ok || !tc.check(lr.R) {
			t.Errorf("copy %s: ReadFrom got %#v, want an *io.LimitedReader over the connection", tc.dir, r)
		}
	}
	_ = client.Close()
	_ = runtime.Close()
	wait()
}

// endedLog passes on the "stream ended" records.
type endedLog chan slog.Record

func (endedLog) Enabled(context.Context, slog.Level) bool { return true }
func (l endedLog) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l endedLog) WithGroup(string) slog.Handler          { return l }

func (l endedLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "stream ended" {
		l <- r.Clone()
	}
	return nil
}

// A stream short of one chunk is counted only when its copy ends, after
// the proxy has returned: the log line must still have those bytes.
func TestStreamEndedLogCountsEveryByte(t *testing.T) {
	backend := newEchoBackend(t)
	ended := make(endedLog, 1)
	s, err := Listen(testConfig(), Deps{Runtime: &fakeRuntime{url: backend.URL}, Metrics: metrics.NewStreaming(prometheus.NewRegistry()), Log: slog.New(ended)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		<-served
	})

	u, err := s.Issue(Exec, &runtimeapi.ExecRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c, br, resp := upgrade(t, s.Addr(), http.MethodPost, pathOf(t, u))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatal(resp.Status)
	}
	fmt.Fprint(c, "ping\n")
	if line, err := br.ReadString('\n'); line != "ping\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	_ = c.Close()

	const upgraded = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"
	var got any
	(<-ended).Attrs(func(a slog.Attr) bool {
		if a.Key == "bytes_to_client" {
			got = a.Value.Any()
		}
		return true
	})
	if want := int64(len(upgraded) + len("ping\n")); got != want {
		t.Errorf("stream ended with bytes_to_client=%v, want %d", got, want)
	}
}
