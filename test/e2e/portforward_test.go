package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	//lint:ignore SA1019 client-go's portforward still takes apimachinery's Dialer, not k8s.io/streaming's
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/lockedbuf"
)

const echoPort = 8080

// echoPod runs a pod whose container echoes every TCP connection on
// echoPort, listening inside the pod's network namespace only.
func echoPod(t *testing.T, crishimEndpoint string) string {
	t.Helper()
	rs, _ := criClients(t, crishimEndpoint)
	name := uniqueName("pf")
	podCfg := podConfig(t, name, nil)
	podID := runPod(t, rs, podCfg)
	ctrID := startContainer(t, rs, podID, podCfg, containerConfig("echo", fmt.Sprintf("exec nc -ll -p %d -e cat", echoPort), nil))
	// client-go's port-forwarder gives up on the first refused connection,
	// so the server must listen before anyone forwards.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitUntil(t, ctx, "the echo server to listen", func() bool {
		_, _, err := rs.ExecSync(ctx, ctrID, []string{"sh", "-c", listeningScript}, 10*time.Second)
		return err == nil
	})
	return podID
}

// listeningScript succeeds once something listens on echoPort (hex 1F90,
// state 0A in /proc/net/tcp*).
const listeningScript = "grep -q ':1F90 [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6"

// forwardEcho forwards a local port to the pod's echoPort over dialer, as
// kubectl port-forward does, and returns the local address, the forwarder's
// error output, and stop, which ends the forwarding (also at the test's end).
func forwardEcho(t *testing.T, dialer httpstream.Dialer) (local string, fwErr *lockedbuf.Buffer, stop func()) {
	t.Helper()
	stopCh, ready := make(chan struct{}), make(chan struct{})
	var fwOut lockedbuf.Buffer
	fwErr = new(lockedbuf.Buffer)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", echoPort)}, stopCh, ready, &fwOut, fwErr)
	if err != nil {
		t.Fatal(err)
	}
	fwDone := make(chan error, 1)
	go func() { fwDone <- fw.ForwardPorts() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(stopCh)
			<-fwDone
		})
	}
	t.Cleanup(stop)
	select {
	case <-ready:
	case err := <-fwDone:
		once.Do(func() {}) // it ended by itself
		t.Fatalf("port-forward: %v\n%s", err, fwErr.String())
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), fwErr, stop
}

// TestPortForwardThroughCrishimStreaming: client-go's port-forwarder (what
// kubectl port-forward uses) through crishim to an echo server in the pod:
// 64 MiB of random data come back unchanged.
func TestPortForwardThroughCrishimStreaming(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	podID := echoPod(t, d.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	resp, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{echoPort}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	checkCrishimURL(t, resp.Url, "portforward")
	u, _ := url.Parse(resp.Url)
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	local, fwErr, _ := forwardEcho(t, dialer)

	if err := echoOnce(local); err != nil {
		t.Fatalf("echo through the port-forward: %v\n%s", err, fwErr.String())
	}

	conn, err := net.Dial("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard
	const size = 64 << 20
	sent := sha256.New()
	written := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, io.TeeReader(io.LimitReader(rand.Reader, size), sent))
		written <- err
	}()
	got := sha256.New()
	if n, err := io.CopyN(got, conn, size); err != nil {
		t.Fatalf("read back %d of %d bytes: %v", n, size, err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatal("64 MiB came back changed")
	}
	m := scrape(t, d.Metrics)
	if b := m[`crishim_stream_bytes_total{direction="to_runtime",kind="portforward"}`]; b < size {
		t.Errorf("crishim counted %v bytes to the runtime, want at least %d", b, size)
	}
}

func echoOnce(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("echo %q", buf)
	}
	return nil
}

// TestPortForwardOverWebSocketThroughCrishim: port-forward's WebSocket
// protocol (v4.channel.k8s.io, ports from the CRI request), which client-go
// has no client for, spoken directly: channel 0 carries data, channel 1
// errors, each opened with the port number.
func TestPortForwardOverWebSocketThroughCrishim(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	podID := echoPod(t, d.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	for {
		resp, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{echoPort}})
		if err != nil {
			t.Fatalf("PortForward: %v", err)
		}
		got, err := websocketEcho(ctx, resp.Url, payload)
		if err == nil {
			if !bytes.Equal(got, payload) {
				t.Fatal("data came back changed")
			}
			return
		}
		t.Logf("echo over WebSocket: %v (the server may still be starting)", err)
		select {
		case <-ctx.Done():
			t.Fatal("no echo over WebSocket")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// websocketEcho sends payload in chunks, each echoed before the next goes:
// containerd 1.6 stalls a WebSocket port-forward that has more than a few
// KiB in flight, talked to directly as much as through crishim.
func websocketEcho(ctx context.Context, rawURL string, payload []byte) ([]byte, error) {
	wsURL := "ws" + rawURL[len("http"):]
	dialer := websocket.Dialer{Subprotocols: []string{"v4.channel.k8s.io"}}
	conn, resp, err := dialer.DialContext(ctx, wsURL, nil)
	if err != nil {
		return nil, fmt.Errorf("dial %v: %w", resp, err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang guard
	var got []byte
	opened := map[byte]bool{}
	for off := 0; off < len(payload); off += wsChunk {
		end := min(off+wsChunk, len(payload))
		if err := conn.WriteMessage(websocket.BinaryMessage, append([]byte{0}, payload[off:end]...)); err != nil {
			return nil, err
		}
		for len(got) < end {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				return nil, err
			}
			if len(msg) == 0 {
				continue
			}
			ch, data := msg[0], msg[1:]
			if !opened[ch] { // each channel opens with the port, little endian
				opened[ch] = true
				if len(data) != 2 || binary.LittleEndian.Uint16(data) != echoPort {
					return nil, fmt.Errorf("channel %d opened with %v", ch, data)
				}
				continue
			}
			if ch == 1 && len(data) > 0 {
				return nil, fmt.Errorf("error channel: %s", data)
			}
			if ch == 0 {
				got = append(got, data...)
			}
		}
	}
	return got, nil
}

const wsChunk = 4000
