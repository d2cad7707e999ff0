package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// present sends a stream URL a plain request: enough to spend or probe a
// token without a client library.
func present(t *testing.T, method, rawURL string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// TestStreamTokens: a token is good once, for --stream-token-ttl, and no
// more than --stream-max-tokens are outstanding; unknown tokens are 404 and
// other methods 405.
func TestStreamTokens(t *testing.T) {
	const ttl = 2 * time.Second
	d := startCrishim(t, testbed.Endpoint, "--stream-token-ttl", ttl.String(), "--stream-max-tokens", "2")
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "tokens", sleeperScript)
	ctx := context.Background()
	execURL := func() (string, error) {
		resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"true"}, Stdout: true})
		return resp.GetUrl(), err
	}

	t.Run("single use", func(t *testing.T) {
		u, err := execURL()
		if err != nil {
			t.Fatal(err)
		}
		if err := spdyExecutor(t, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
			t.Fatalf("first use: %v", err)
		}
		err = spdyExecutor(t, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("second use: %v, want 404", err)
		}
	})

	t.Run("unknown token and wrong method", func(t *testing.T) {
		u, err := execURL()
		if err != nil {
			t.Fatal(err)
		}
		base := u[:strings.LastIndex(u, "/")]
		if resp := present(t, http.MethodPost, base+"/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("unknown token: %s, want 404", resp.Status)
		}
		for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if resp := present(t, m, u); resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s: %s, want 405", m, resp.Status)
			}
		}
		// The 405s did not spend it; a request that is no upgrade does.
		if resp := present(t, http.MethodPost, u); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain POST: %s, want 400", resp.Status)
		}
		if resp := present(t, http.MethodPost, u); resp.StatusCode != http.StatusNotFound {
			t.Errorf("spent token: %s, want 404", resp.Status)
		}
	})

	var outstanding []string
	t.Run("cap", func(t *testing.T) {
		for range 2 {
			u, err := execURL()
			if err != nil {
				t.Fatalf("within the cap: %v", err)
			}
			outstanding = append(outstanding, u)
		}
		_, err := execURL()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("beyond the cap: %v, want ResourceExhausted", err)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		if len(outstanding) != 2 {
			t.Skip("needs the cap's tokens")
		}
		time.Sleep(ttl + 500*time.Millisecond) // the TTL itself is what is tested
		if resp := present(t, http.MethodPost, outstanding[0]); resp.StatusCode != http.StatusNotFound {
			t.Errorf("expired token: %s, want 404", resp.Status)
		}
		// Expired tokens no longer count against the cap.
		u, err := execURL()
		if err != nil {
			t.Fatalf("after expiry: %v", err)
		}
		if err := spdyExecutor(t, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
			t.Fatalf("fresh token after expiry: %v", err)
		}
		m := scrape(t, d.Metrics)
		if m[`crishim_stream_tokens_expired_total{kind="exec"}`] != 2 {
			t.Errorf("tokens expired = %v, want 2", m[`crishim_stream_tokens_expired_total{kind="exec"}`])
		}
		if m[`crishim_stream_tokens_rejected_total{kind="exec",reason="full"}`] != 1 {
			t.Errorf("tokens rejected (full) = %v, want 1", m[`crishim_stream_tokens_rejected_total{kind="exec",reason="full"}`])
		}
	})
}

// TestStreamClientGoneMidStream: a client that vanishes mid-stream leaves
// nothing behind: crishim's session and goroutines go, and the runtime side
// is closed (the exec'd cat sees its stdin end and exits).
func TestStreamClientGoneMidStream(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "gone", sleeperScript)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// One full session first, so that whatever crishim starts once (and
	// keeps) is in the baseline.
	u, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"true"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := spdyExecutor(t, u.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
		t.Fatal(err)
	}
	baseline := settledGoroutines(t, ctx, d.Metrics, -1)

	for _, ex := range executors {
		t.Run(ex.name, func(t *testing.T) {
			resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"cat"}, Stdin: true, Stdout: true})
			if err != nil {
				t.Fatal(err)
			}
			tm := newTerminal()
			sctx, hangUp := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- ex.new(t, resp.Url).StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: tm.inR, Stdout: tm})
			}()
			tm.typeUntil(t, ctx, "still here\n", "still here")
			if got := scrape(t, d.Metrics)[`crishim_stream_sessions_active{kind="exec"}`]; got != 1 {
				t.Fatalf("sessions active mid-stream = %v, want 1", got)
			}
			hangUp() // the client goes away without ending the command
			<-done
			_ = tm.in.Close()
			waitUntil(t, ctx, "crishim's session to end", func() bool {
				return scrape(t, d.Metrics)[`crishim_stream_sessions_active{kind="exec"}`] == 0
			})
			waitUntil(t, ctx, "the runtime side to close (cat to exit)", func() bool {
				out, _, err := rs.ExecSync(ctx, ctrID, []string{"ps", "-o", "comm"}, 10*time.Second)
				return err == nil && !strings.Contains(string(out), "cat")
			})
			settledGoroutines(t, ctx, d.Metrics, baseline)
		})
	}
}

// settledGoroutines polls crishim's go_goroutines until it is at most want
// (want < 0: until two scrapes agree) and returns it.
func settledGoroutines(t *testing.T, ctx context.Context, metricsAddr string, want float64) float64 {
	t.Helper()
	last := -1.0
	for {
		n := scrape(t, metricsAddr)["go_goroutines"]
		if (want >= 0 && n <= want) || (want < 0 && n == last) {
			return n
		}
		last = n
		select {
		case <-ctx.Done():
			t.Fatalf("crishim has %v goroutines, want at most %v: something leaked", n, want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitUntil polls cond; the deadline is ctx's, a hang guard only.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
