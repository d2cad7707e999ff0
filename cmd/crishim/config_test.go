package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigMerge: the file's keys apply, flags on the command line win,
// and a flag given explicitly empty stays empty whatever the file says.
func TestConfigMerge(t *testing.T) {
	file := writeConfig(t, `version = 1
log-level = "debug"
log-format = "json"
containerd-address = "/file/containerd.sock"
stream-max-tokens = 7
record-input = true
shutdown-timeout = "3s"
`)
	tests := []struct {
		name string
		args []string
		want map[string]string
	}{
		{"file only", nil, map[string]string{"log-level": "debug", "log-format": "json", "containerd-address": "/file/containerd.sock", "stream-max-tokens": "7", "record-input": "true", "shutdown-timeout": "3s"}},
		{"flags win", []string{"--log-level", "warn", "--stream-max-tokens=9", "--record-input=false"}, map[string]string{"log-level": "warn", "log-format": "json", "stream-max-tokens": "9", "record-input": "false"}},
		{"empty flag wins", []string{"--containerd-address", ""}, map[string]string{"containerd-address": ""}},
		{"untouched keys keep defaults", nil, map[string]string{"listen": "/run/crishim/crishim.sock", "metrics-address": "127.0.0.1:9847"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ld, err := loadArgs(append([]string{"--config", file}, tt.args...))
			if err != nil {
				t.Fatal(err)
			}
			got := ld.values()
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
	// Without --config, the default path is read when it exists.
	defer func(p string) { defaultConfigPath = p }(defaultConfigPath)
	defaultConfigPath = file
	ld, err := loadArgs(nil)
	if err != nil || ld.values()["log-format"] != "json" {
		t.Errorf("default path not read: %v, log-format %q", err, ld.values()["log-format"])
	}
	if ld, err := loadArgs([]string{"--config", ""}); err != nil || ld.values()["log-format"] != "text" {
		t.Errorf(`--config "" read a file: %v`, err)
	}
}

// TestConfigErrors: a bad file is refused naming the file, the line and
// the key.
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"unknown key", "version = 1\n\nlog-levle = \"debug\"\n", `:3: unknown key "log-levle" (did you mean "log-level"?)`},
		{"bad value", "version = 1\nlog-format = \"json\"\nlog-level = \"loud\"\n", `:3: key "log-level": "loud": want debug, info, warn or error`},
		{"bad enum", "version = 1\nstop-signal-mode = \"always\"\n", `:2: key "stop-signal-mode": "always"`},
		{"negative", "version = 1\n\n\naudit-log-maxsize = -1\n", `:4: key "audit-log-maxsize": "-1": must not be negative`},
		{"bad duration", "version = 1\nshutdown-timeout = \"soon\"\n", `:2: key "shutdown-timeout": "soon"`},
		{"wrong type", "version = 1\nmax-message-size = \"big\"\n", `:2: key "max-message-size": want an integer, got the string "big"`},
		{"string for bool", "version = 1\nrecord-input = \"yes\"\n", `:2: key "record-input": want true or false`},
		{"number for string", "version = 1\nlisten = 5\n", `:2: key "listen": want a string`},
		{"bad endpoint", "version = 1\nruntime-endpoint = \"tcp://x\"\n", `:2: key "runtime-endpoint"`},
		{"table", "version = 1\n[audit]\nlog = \"x\"\n", `:2: table [audit]`},
		{"dotted", "version = 1\naudit.log = \"x\"\n", `:2: dotted key audit.log`},
		{"syntax", "version = 1\nlisten = \"x\n", `:2:`},
		{"duplicate", "version = 1\nlisten = \"x\"\nlisten = \"y\"\n", `:3:`},
		{"no version", "listen = \"x\"\n", `no version key`},
		{"other version", "version = 2\n", `:1: version = the integer 2`},
		{"not a settings key", "version = 1\nconfig = \"/x\"\n", `:2: unknown key "config"`},
		{"removed key", "version = 1\n\nrelay = \"h2\"\n", `:3: the relay key was removed in 0.1.0: crishim has one relay, the raw HTTP/2 one (the grpc-go relay is gone); delete the key`},
		{"removed notification key", "version = 1\nnotification-gc-after = \"3s\"\n", `:2: the notification-gc-after key was removed in 0.2.0: nodes no longer delete Notifications (crishim.io/v1alpha2); crishim-notification-controller deletes them, and its --gc-after is the testing knob; delete the key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeConfig(t, tt.content)
			_, err := loadArgs([]string{"--config", file})
			if err == nil || !strings.Contains(err.Error(), file+tt.want) && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one with %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), file) {
				t.Errorf("err %v does not name the file", err)
			}
		})
	}
	if _, err := loadArgs([]string{"--config", "/nonexistent/crishim.toml"}); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("a missing --config file: %v", err)
	}
}

func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(args, &out, &errOut)
	return out.String() + errOut.String(), code
}

// TestConfigDefault: the default file is valid input as written and with
// every key uncommented, and both give the defaults.
func TestConfigDefault(t *testing.T) {
	def, code := runCLI(t, "config", "default")
	if code != 0 {
		t.Fatalf("config default: exit %d\n%s", code, def)
	}
	base, err := loadArgs([]string{"--config", ""})
	if err != nil {
		t.Fatal(err)
	}
	uncommented := regexp.MustCompile(`(?m)^# ([a-z-]+ = )`).ReplaceAllString(def, "$1")
	for _, content := range []string{def, uncommented} {
		ld, err := loadArgs([]string{"--config", writeConfig(t, content)})
		if err != nil {
			t.Fatalf("%v\n%s", err, content)
		}
		for k, v := range base.values() {
			if got := ld.values()[k]; got != v {
				t.Errorf("%s = %q from the default file, %q without", k, got, v)
			}
		}
	}
	base.fs.VisitAll(func(f *pflag.Flag) {
		if has := strings.Contains(uncommented, "\n"+f.Name+" = "); has == f.Hidden {
			t.Errorf("the default file has key %s: %v; want it for every flag not hidden (for tests)", f.Name, has)
		}
	})
}

// TestConfigDump: dump shows the settings in force, flags after the
// command included, and is itself valid input that dumps the same.
func TestConfigDump(t *testing.T) {
	file := writeConfig(t, "version = 1\nlog-format = \"json\"\nnode-name = \"n1\"\n")
	dump, code := runCLI(t, "--config", file, "config", "dump", "--log-level=debug", "--runtime-endpoint", "unix:///x/c.sock")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, dump)
	}
	for _, want := range []string{`log-format = "json"`, `log-level = "debug"`, `node-name = "n1"`,
		`containerd-address = "/x/c.sock"`, `image-endpoint = "unix:///x/c.sock"`, "max-message-size = 16777216", "record-input = false"} {
		if !strings.Contains(dump, "\n"+want+"\n") {
			t.Errorf("dump lacks %s:\n%s", want, dump)
		}
	}
	again, code := runCLI(t, "--config", writeConfig(t, dump), "config", "dump")
	body := func(s string) string { return s[strings.Index(s, "\nversion"):] }
	if code != 0 || body(again) != body(dump) {
		t.Errorf("the dump read back dumps differently (exit %d):\n%s\nwant\n%s", code, again, dump)
	}
	if out, code := runCLI(t, "--config", writeConfig(t, "version = 1\nlog-format = \"xml\"\n"), "config", "dump"); code != 2 || !strings.Contains(out, `:2: key "log-format"`) {
		t.Errorf("dump of a bad file: exit %d\n%s", code, out)
	}
}

// TestCommandLine: help exits 0, bad usage 2, flags go anywhere and in
// both spellings, and completion scripts come out.
func TestCommandLine(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Examples:"},
		{[]string{"-h"}, 0, "--runtime-endpoint"},
		{[]string{"config", "dump", "--help"}, 0, "crishim config dump"},
		{[]string{"--version"}, 0, "crishim dev"},
		{[]string{"version"}, 0, "crishim dev (commit"},
		{[]string{"completion", "bash"}, 0, "complete -o default -F __start_crishim crishim"},
		{[]string{"completion", "zsh"}, 0, "#compdef crishim"},
		{[]string{"completion", "fish"}, 0, "complete -c crishim"},
		{[]string{"serve"}, 2, `unknown command "serve"`},
		{[]string{"--listen"}, 2, "flag needs an argument"},
		{[]string{"--log-format=xml"}, 2, `invalid argument "xml" for "--log-format" flag: want text or json`},
		{[]string{"--relay=grpc"}, 2, "--relay was removed in 0.1.0: crishim has one relay, the raw HTTP/2 one (the grpc-go relay is gone); drop the flag"},
		{[]string{"config", "dump", "--relay", "h2"}, 2, "--relay was removed in 0.1.0"},
		{[]string{"--notification-gc-after=3s"}, 2, "--notification-gc-after was removed in 0.2.0: nodes no longer delete Notifications (crishim.io/v1alpha2); crishim-notification-controller deletes them, and its --gc-after is the testing knob; drop the flag"},
		{[]string{"--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{[]string{"config"}, 2, "want a command"},
		{[]string{"config", "dump", "--config=", "--log-format", "json"}, 0, `log-format = "json"`},
	}
	for _, tt := range tests {
		out, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("crishim %q: exit %d, want %d with %q\n%.600s", tt.args, code, tt.code, tt.want, out)
		}
	}
}

// TestConfigDumpPreflight: dump fails, as start does (exit 1, naming the
// flag), for a configuration whose files start cannot use: a missing audit
// log directory, an audit log that is not a file, an unreadable
// kubeconfig, a missing TLS certificate. A usable one dumps.
func TestConfigDumpPreflight(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string // "" for success
	}{
		{[]string{"--audit-log", filepath.Join(dir, "missing", "audit.log")}, "--audit-log: directory " + filepath.Join(dir, "missing") + " does not exist"},
		{[]string{"--audit-log", dir}, "is not a regular file"},
		{[]string{"--kubeconfig", filepath.Join(dir, "kubeconfig")}, "--kubeconfig"},
		{[]string{"--streaming-tls-cert", filepath.Join(dir, "c.pem"), "--streaming-tls-key", filepath.Join(dir, "k.pem")}, "--streaming-tls-cert"},
		{[]string{"--audit-log", filepath.Join(dir, "audit.log")}, ""},
	}
	for _, tt := range tests {
		out, code := runCLI(t, append(tt.args, "config", "dump")...)
		switch {
		case tt.want == "" && code != 0:
			t.Errorf("%v: exit %d, want 0\n%s", tt.args, code, out)
		case tt.want != "" && (code != 1 || !strings.Contains(out, tt.want)):
			t.Errorf("%v: exit %d, want 1 with %q\n%s", tt.args, code, tt.want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.log")); err == nil {
		t.Error("config dump created the audit log")
	}
}
