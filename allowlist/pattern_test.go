package allowlist

import (
	"strings"
	"testing"
)

const (
	digA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		name    string
		want    bool
	}{
		{"busybox", "busybox", true},
		{"busybox", "docker.io/library/busybox:1.36", true},
		{"busybox", "busybox@" + digA, true},
		{"busybox", "docker.io/library/busybox2", false},
		{"docker.io/library/busybox", "busybox", true},
		{"busybox:1.36", "busybox:1.36", true},
		{"busybox:1.36", "busybox", false}, // :latest
		{"busybox:1.*", "busybox:1.36.1", true},
		{"busybox:1.*", "busybox:2.0", false},
		{"busybox:1.36", "busybox@" + digA, false},
		{"busybox@" + digA, "busybox@" + digA, true},
		{"busybox@" + digA, "busybox@" + digB, false},
		// An unpinned tag is not a digest, whatever it points at.
		{"busybox@" + digA, "busybox:latest", false},
		{"registry.corp:5000/debug/*", "registry.corp:5000/debug/tools:v1", true},
		{"registry.corp:5000/debug/*", "registry.corp:5000/debug/team/tools", false},
		{"registry.corp:5000/debug/**", "registry.corp:5000/debug/team/tools", true},
		{"registry.corp:5000/debug/**", "registry.corp:5000/debugger/tools", false},
		{"*.corp.example/debug", "eu.corp.example/debug:1", true},
		{"*.corp.example/debug", "evil.example/corp.example/debug", false},
		{"gcr.io/*/debug", "gcr.io/team/debug", true},
		{"localhost/debug", "localhost/debug:x", true},
		// IDs name no repository.
		{"busybox", digA, false},
		{"busybox", strings.TrimPrefix(digA, "sha256:"), false},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tt.pattern, err)
		}
		l := &List{patterns: []Pattern{p}}
		if _, got := l.Match(tt.name); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestParsePatternErrors(t *testing.T) {
	tests := []struct{ pattern, want string }{
		{"busybox@sha256:123", "digest"},
		{"busybox:1@" + digA, "a tag and a digest"},
		{"Busybox", "repository"},
		{"busybox:", "tag"},
		{"registry.corp//x", "repository"},
		{"registry.corp/x/", "repository"},
		{"busy box", "repository"},
	}
	for _, tt := range tests {
		_, err := ParsePattern(tt.pattern)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.pattern) {
			t.Errorf("ParsePattern(%q) = %v; want an error naming the pattern and %q", tt.pattern, err, tt.want)
		}
	}
}

func TestParseListAndFlag(t *testing.T) {
	l, err := Parse(strings.NewReader("# debug images\nbusybox:1.36, registry.corp/debug/*  # team tools\n\nalpine@" + digA + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}
	if p, ok := l.Match("registry.corp/debug/x:1"); !ok || p.String() != "registry.corp/debug/*" {
		t.Errorf("Match = %v %v", p, ok)
	}
	if _, err := Parse(strings.NewReader("busybox\nBAD\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Parse with a bad second line = %v, want it named", err)
	}
	if _, err := ParseFlag("busybox,BAD"); err == nil || !strings.HasPrefix(err.Error(), "--debug-image-allowlist: pattern \"BAD\"") {
		t.Errorf("ParseFlag = %v, want the flag and the pattern named", err)
	}
}
