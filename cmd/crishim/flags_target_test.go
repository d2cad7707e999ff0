package main

import (
	"strings"
	"testing"
)

func TestTargetFlags(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		mode      string
		address   string
		namespace string
		err       string
	}{
		{name: "defaults", mode: "auto", address: "/run/containerd/containerd.sock", namespace: "k8s.io"},
		{name: "address follows the runtime endpoint", args: []string{"--runtime-endpoint", "unix:///x/c.sock"}, mode: "auto", address: "/x/c.sock", namespace: "k8s.io"},
		{name: "empty address disables", args: []string{"--containerd-address", ""}, mode: "auto", namespace: "k8s.io"},
		{name: "explicit", args: []string{"--pid-target-mode", "emulate", "--containerd-address", "/y.sock", "--containerd-namespace", "other"}, mode: "emulate", address: "/y.sock", namespace: "other"},
		{name: "native", args: []string{"--pid-target-mode", "native"}, mode: "native", address: "/run/containerd/containerd.sock", namespace: "k8s.io"},
		{name: "bad mode", args: []string{"--pid-target-mode", "reject"}, err: "--pid-target-mode"},
		{name: "emulate without containerd", args: []string{"--pid-target-mode", "emulate", "--containerd-address="}, err: "--containerd-address is empty"},
		{name: "no namespace", args: []string{"--containerd-namespace", ""}, err: "--containerd-namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := parseFlagsOrErr(t, tt.args, tt.err)
			if !ok {
				return
			}
			got := c.target
			if got.pidTargetMode != tt.mode || got.containerdAddress != tt.address || got.containerdNamespace != tt.namespace {
				t.Errorf("got %+v; want mode %s, address %q, namespace %s", got, tt.mode, tt.address, tt.namespace)
			}
		})
	}
}

// parseFlagsOrErr parses args; with wantErr set it checks the error names
// it and says there is no config to look at.
func parseFlagsOrErr(t *testing.T, args []string, wantErr string) (config, bool) {
	t.Helper()
	c, err := parseFlags(args)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err %v, want one mentioning %q", err, wantErr)
		}
		return c, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, true
}
