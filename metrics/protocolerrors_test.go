package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestProtocolErrorsByReason(t *testing.T) {
	m := New("test", "abc", nil)
	m.InitProtocolErrors([]string{"flood", "frame_size"})
	m.ProtocolError("flood")
	m.ProtocolError("flood")
	if got := testutil.ToFloat64(m.protocolErrors.WithLabelValues("flood")); got != 2 {
		t.Errorf(`protocol errors{reason="flood"} = %v, want 2`, got)
	}
	if n := testutil.CollectAndCount(m.protocolErrors); n != 2 {
		t.Errorf("%d series, want 2 (one at zero)", n)
	}
}
