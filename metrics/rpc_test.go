package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crishim/crishim/caller"
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

// Calls are counted by caller: the kubelet's apart from everyone else's,
// with the method label bounded as for every other series.
func TestCallsByCaller(t *testing.T) {
	m := New("test", "abc", []string{"/a.B/C"})
	unary := m.UnaryInterceptor()
	ok := func(context.Context, any) (any, error) { return nil, nil }
	kubelet := caller.NewContext(context.Background(), &caller.Process{Kubelet: true})
	operator := caller.NewContext(context.Background(), &caller.Process{PID: 7})
	for _, ctx := range []context.Context{kubelet, kubelet, operator, context.Background()} {
		_, _ = unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, ok)
	}
	_, _ = unary(operator, nil, &grpc.UnaryServerInfo{FullMethod: "/made/Up"}, ok)
	// The h2 relay's series.
	m.Method("/a.B/C").Ended(codes.NotFound, 0)
	m.OtherMethod("/a.B/C").Ended(codes.NotFound, 0)
	for _, tc := range []struct {
		caller, method, code string
		want                 float64
	}{
		{"kubelet", "/a.B/C", "OK", 2},
		{"other", "/a.B/C", "OK", 2},
		{"other", "other", "OK", 1},
		{"kubelet", "/a.B/C", "NotFound", 1},
		{"other", "/a.B/C", "NotFound", 1},
	} {
		if got := testutil.ToFloat64(m.byCaller.WithLabelValues(tc.caller, tc.method, tc.code)); got != tc.want {
			t.Errorf("crishim_cri_calls_by_caller_total{caller=%q,method=%q,code=%q} = %v, want %v", tc.caller, tc.method, tc.code, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/a.B/C", "OK")); got != 4 {
		t.Errorf("requests{/a.B/C,OK} = %v, want 4: every call counted once whoever made it", got)
	}
}
