package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzClientFrames sends a live session whatever follows the client
// preface. Whatever it is, the relay must end the connection or keep
// serving it, never hang or panic, and keep serving other clients. Seeds
// are in testdata/fuzz/FuzzClientFrames; `go test` runs them.
func FuzzClientFrames(f *testing.F) {
	// One relay for every input: starting one per input would fuzz the
	// start, not the input.
	sock := fakeSock(f)
	startFake(f, sock, &fakeRuntime{})
	p := startProxy(f, sock)
	f.Fuzz(func(t *testing.T, in []byte) {
		nc, err := net.Dial("unix", p.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(hangBound))
		go func() {
			_, _ = io.WriteString(nc, http2.ClientPreface)
			_, _ = nc.Write(in)
			// The input may end in the middle of a frame or a call, which
			// the relay rightly waits for: end it.
			_ = nc.(*net.UnixConn).CloseWrite()
		}()
		// EOF, or a reset when it hung up on unread input: either will do.
		if _, err := io.Copy(io.Discard, nc); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the relay neither finished nor hung up: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hangBound)
		defer cancel()
		if _, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatalf("another client after this input: %v", err)
		}
	})
}
