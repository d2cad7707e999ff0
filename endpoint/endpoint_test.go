package endpoint

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock", true},
		{"unix:///run//crio/../crio/crio.sock", "/run/crio/crio.sock", true},
		{"", "", false},
		{"/run/containerd/containerd.sock", "/run/containerd/containerd.sock", true},
		{"/run//crishim/./crishim.sock", "/run/crishim/crishim.sock", true},
		{"run/containerd.sock", "", false},
		{"tcp://127.0.0.1:1234", "", false},
		{"unix://run/containerd.sock", "", false},
		{"unix://relative", "", false},
		{"unix:relative.sock", "", false},
		{"unix:///x.sock?a=b", "", false},
		{"npipe:////./pipe/containerd", "", false},
		{"::", "", false},
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
