package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/crishim/crishim/shim/crishimv1"
)

// fakeCrishim answers crishim.v1 with fixed answers and records the last
// Notify request.
type fakeCrishim struct {
	crishimv1.UnimplementedCrishimServer
	notify *crishimv1.NotifyRequest
}

func (f *fakeCrishim) Status(context.Context, *crishimv1.StatusRequest) (*crishimv1.StatusResponse, error) {
	return &crishimv1.StatusResponse{Version: "9.9.9", RuntimeReady: true, RuntimeName: "containerd", RuntimeVersion: "2.1.0", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeCrishim) Notify(_ context.Context, req *crishimv1.NotifyRequest) (*crishimv1.NotifyResponse, error) {
	f.notify = req
	return &crishimv1.NotifyResponse{Pods: []*crishimv1.PodNotification{{PodSandboxId: "p1", PodName: "web", PodNamespace: "default",
		Containers: []*crishimv1.ContainerNotification{{ContainerName: "app", Succeeded: true}}}}}, nil
}

func serveFake(t *testing.T) (string, *fakeCrishim) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "crishim.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &fakeCrishim{}
	crishimv1.RegisterCrishimServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock, f
}

func ctl(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := execute(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestCommandLine: help exits 0, bad usage 2, unreachable crishim 1 with a
// hint, completion scripts come out, -o is checked.
func TestCommandLine(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Examples:"},
		{[]string{"notify", "-h"}, 0, "--selector"},
		{[]string{"completion", "bash"}, 0, "__start_crishimctl"},
		{[]string{"completion", "zsh"}, 0, "#compdef crishimctl"},
		{[]string{"completion", "fish"}, 0, "complete -c crishimctl"},
		{nil, 2, "no command"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"status", "-o", "xml"}, 2, "want table, json or yaml"},
		{[]string{"signal", "c1"}, 2, "want CONTAINER SIGNAL"},
		{[]string{"notify", "reload"}, 2, "exactly one of --pod and --selector"},
		{[]string{"exec", "c1", "ls", "-l"}, 2, "goes after --"},
		{[]string{"version", "--client"}, 0, "Client Version: dev"},
		{[]string{"--endpoint", "unix:///nonexistent/crishim.sock", "status"}, 1, "is crishim running? (systemctl status crishim) or pass --endpoint"},
		{[]string{"version", "--endpoint=unix:///nonexistent/crishim.sock"}, 1, "Client Version: dev"},
	}
	for _, tt := range tests {
		out, errOut, code := ctl(tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("crishimctl %q: exit %d, want %d with %q\n%.600s%.600s", tt.args, code, tt.code, tt.want, out, errOut)
		}
	}
}

// TestOutput: flags go after positional arguments, and -o json and yaml
// carry the documented field names.
func TestOutput(t *testing.T) {
	endpoint, fake := serveFake(t)
	out, errOut, code := ctl("notify", "--pod", "p1", "reload", "-o", "json", "--endpoint", endpoint)
	if code != 0 || fake.notify.GetNotifier() != "reload" || fake.notify.GetPodSandboxId() != "p1" {
		t.Fatalf("notify with flags after NAME: exit %d, request %v\n%s", code, fake.notify, errOut)
	}
	var notify struct {
		Pods []struct {
			PodSandboxID string `json:"podSandboxId"`
			PodName      string `json:"podName"`
			Containers   []struct {
				ContainerName string  `json:"containerName"`
				Succeeded     bool    `json:"succeeded"`
				StartedAt     *string `json:"startedAt"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(out), &notify); err != nil || notify.Pods[0].PodName != "web" || !notify.Pods[0].Containers[0].Succeeded {
		t.Errorf("notify -o json: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"error": null`) {
		t.Errorf("notify -o json leaves out unset fields:\n%s", out)
	}

	out, _, code = ctl("--endpoint", endpoint, "version", "-o", "json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.ClientVersion.Version != "dev" || v.ServerVersion == nil || v.ServerVersion.Version != "9.9.9" {
		t.Errorf("version -o json: exit %d, %v\n%s", code, err, out)
	}
	out, _, code = ctl("version", "--endpoint", endpoint)
	if code != 0 || !strings.Contains(out, "Client Version: dev\nServer Version: 9.9.9\nRuntime: containerd 2.1.0 (CRI v1)\n") {
		t.Errorf("version: exit %d\n%s", code, out)
	}
	out, _, code = ctl("status", "--endpoint", endpoint, "-o", "yaml")
	if code != 0 || !strings.Contains(out, "runtimeVersion: 2.1.0\n") || !strings.Contains(out, "modes: []\n") {
		t.Errorf("status -o yaml: exit %d\n%s", code, out)
	}
	out, _, code = ctl("status", "--endpoint", endpoint, "-o", "text")
	if code != 0 || !strings.Contains(out, "crishim version:   9.9.9\n") {
		t.Errorf("status -o text: exit %d\n%s", code, out)
	}
}

// TestEndpointForms: --endpoint takes unix:///path and /path, as crictl
// does; without it, CRISHIM_ENDPOINT names the socket; the flag wins over
// the variable; a bad variable is a usage error naming it.
func TestEndpointForms(t *testing.T) {
	ep, _ := serveFake(t)
	path := strings.TrimPrefix(ep, "unix://")
	tests := []struct {
		env  string
		args []string
		code int
		want string // in stderr
	}{
		{"", []string{"--endpoint", ep, "status"}, 0, ""},
		{"", []string{"--endpoint", path, "status"}, 0, ""},
		{ep, []string{"status"}, 0, ""},
		{path, []string{"status"}, 0, ""},
		{"unix:///nonexistent/crishim.sock", []string{"--endpoint", path, "status"}, 0, ""},
		{"relative.sock", []string{"status"}, 2, "CRISHIM_ENDPOINT: "},
	}
	for _, tt := range tests {
		t.Setenv("CRISHIM_ENDPOINT", tt.env)
		_, errOut, code := ctl(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("CRISHIM_ENDPOINT=%q crishimctl %v: exit %d, stderr %q; want %d with %q", tt.env, tt.args, code, errOut, tt.code, tt.want)
		}
	}
}

// TestEndpointFollowsCrishimConfig: with neither --endpoint nor CRISHIM_ENDPOINT,
// crishimctl talks to the socket crishim's config file says crishim listens on (its
// listen key, in either form), from --config or crishim's default file; the flag and
// the variable win over it; an absent default file or one without listen leaves the
// default socket; a named file that cannot be read, or is not TOML, is a usage error.
func TestEndpointFollowsCrishimConfig(t *testing.T) {
	ep, _ := serveFake(t)
	path := strings.TrimPrefix(ep, "unix://")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	listening := write("listen.toml", "version = 1\n# crishim's settings\nlog-level = \"debug\"\nlisten = \""+path+"\"\n")
	listeningURL := write("listen-url.toml", "version = 1\nlisten = \""+ep+"\"\n")
	nowhere := write("nowhere.toml", "version = 1\nlisten = \"/nonexistent/crishim.sock\"\n")
	noListen := write("nolisten.toml", "version = 1\nlog-level = \"debug\"\n")
	broken := write("broken.toml", "listen = \n")
	defer func(old string) { defaultConfig = old }(defaultConfig)
	tests := []struct {
		defaultFile string
		env         string
		args        []string
		code        int
		want        string // in stderr
	}{
		{listening, "", []string{"status"}, 0, ""},
		{filepath.Join(dir, "absent.toml"), "", []string{"--config", listeningURL, "status"}, 0, ""},
		{listening, "", []string{"--config", nowhere, "status"}, 1, "/nonexistent/crishim.sock"},
		{nowhere, "", []string{"--endpoint", ep, "status"}, 0, ""},
		{nowhere, ep, []string{"status"}, 0, ""},
		{noListen, "", []string{"status"}, 1, "/run/crishim/crishim.sock"},
		{filepath.Join(dir, "absent.toml"), "", []string{"status"}, 1, "/run/crishim/crishim.sock"},
		{listening, "", []string{"--config", filepath.Join(dir, "absent.toml"), "status"}, 2, "absent.toml"},
		{broken, "", []string{"status"}, 2, "broken.toml"},
		{listening, "", []string{"--config", "", "status"}, 1, "/run/crishim/crishim.sock"},
	}
	for _, tt := range tests {
		defaultConfig = tt.defaultFile
		t.Setenv("CRISHIM_ENDPOINT", tt.env)
		_, errOut, code := ctl(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("default config %s, CRISHIM_ENDPOINT=%q, crishimctl %v: exit %d, stderr %q; want %d with %q",
				filepath.Base(tt.defaultFile), tt.env, tt.args, code, errOut, tt.code, tt.want)
		}
	}
}
