package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestUnknownMethodsShareOneLabel(t *testing.T) {
	m := New("test", "abc", []string{"/runtime.v1.RuntimeService/Version"})
	stream := m.StreamInterceptor()
	for _, method := range []string{"/runtime.v1.RuntimeService/Version", "/x.Y/A", "/x.Y/B", "/evil/" + strings.Repeat("z", 100)} {
		_ = stream(nil, nil, &grpc.StreamServerInfo{FullMethod: method}, func(any, grpc.ServerStream) error {
			return status.Error(codes.NotFound, "nope")
		})
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("other", "NotFound")); got != 3 {
		t.Errorf(`requests{method="other"} = %v, want 3`, got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/runtime.v1.RuntimeService/Version", "NotFound")); got != 1 {
		t.Errorf("requests{Version} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.requests); n != 2 {
		t.Errorf("%d request series, want 2", n)
	}
}

func TestUnaryInterceptorCountsCodes(t *testing.T) {
	m := New("test", "abc", []string{"/a.B/C"})
	unary := m.UnaryInterceptor()
	_, _ = unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, func(context.Context, any) (any, error) { return nil, nil })
	_, _ = unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Unavailable, "down")
	})
	for code, want := range map[string]float64{"OK": 1, "Unavailable": 1} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("/a.B/C", code)); got != want {
			t.Errorf("requests{code=%s} = %v", code, got)
		}
	}
	if got := testutil.ToFloat64(m.inFlight.WithLabelValues("/a.B/C")); got != 0 {
		t.Errorf("in flight after the calls = %v", got)
	}
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
