package shim

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzRewriteStatus: the ContainerStatus rewrite sees the runtime's bytes,
// whatever they are. It never panics or writes into them, and an answer it
// changes is the runtime's answer with stop_signal filled in from the
// annotation, nothing else.
func FuzzRewriteStatus(f *testing.F) {
	g := &signalling{}
	f.Fuzz(func(t *testing.T, msg []byte) {
		orig := bytes.Clone(msg)
		out := g.rewriteStatus(msg)
		if !bytes.Equal(msg, orig) {
			t.Fatal("the rewrite wrote into the runtime's bytes")
		}
		if bytes.Equal(out, msg) {
			return
		}
		var before, after runtimeapi.ContainerStatusResponse
		if err := proto.Unmarshal(msg, &before); err != nil {
			t.Fatalf("rewrote an answer that does not decode: %v", err)
		}
		if err := proto.Unmarshal(out, &after); err != nil {
			t.Fatalf("the rewritten answer does not decode: %v", err)
		}
		sig, err := parseSignal(before.GetStatus().GetAnnotations()[StopSignalAnnotation])
		if err != nil {
			t.Fatalf("rewrote an answer without a readable annotation: %v", err)
		}
		want, _ := toCRISignal(sig)
		if before.GetStatus().GetStopSignal() != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT || after.GetStatus().GetStopSignal() != want {
			t.Fatalf("stop_signal %v -> %v, want RUNTIME_DEFAULT -> %v", before.GetStatus().GetStopSignal(), after.GetStatus().GetStopSignal(), want)
		}
		before.Status.StopSignal = want
		if !proto.Equal(&before, &after) {
			t.Fatal("the rewrite changed more than stop_signal")
		}
	})
}
