package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestStreamingTLS: with a certificate, URLs are https and the kubelet's
// client streams over TLS verified against that certificate.
func TestStreamingTLS(t *testing.T) {
	certFile, keyFile, caPEM := selfSignedCert(t)
	d := startCrishim(t, testbed.Endpoint, "--streaming-tls-cert", certFile, "--streaming-tls-key", keyFile)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "tls", sleeperScript)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"echo", "over tls"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(resp.Url)
	if u.Scheme != "https" {
		t.Fatalf("URL %s: want https", resp.Url)
	}
	e, err := remotecommand.NewSPDYExecutor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "over tls\n" {
		t.Fatalf("exec over TLS: %q, %v", out.String(), err)
	}
}

// TestStreamingRefusesPlainHTTPBeyondLoopback: a non-loopback streaming
// address needs TLS or an explicit --streaming-allow-insecure.
func TestStreamingRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(binDir, "crishim"), "--listen", filepath.Join(dir, "c.sock"),
		"--runtime-endpoint", testbed.Endpoint, "--metrics-address", "", "--streaming-address", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--streaming-allow-insecure") {
		t.Fatalf("crishim --streaming-address 0.0.0.0:0: exit %d (%v), want 2 naming the flag:\n%s", code, err, out)
	}
}

func selfSignedCert(t *testing.T) (certFile, keyFile string, caPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "crishim streaming"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, caPEM
}
