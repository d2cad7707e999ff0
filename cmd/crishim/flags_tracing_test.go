package main

import (
	"strings"
	"testing"
)

func TestTracingFlags(t *testing.T) {
	tests := []struct {
		args     []string
		endpoint string
		rate     int
		wantErr  string
	}{
		{nil, "", 0, ""},
		{[]string{"--tracing-endpoint", "127.0.0.1:4317", "--tracing-sampling-rate-per-million", "1000000"}, "127.0.0.1:4317", 1000000, ""},
		{[]string{"--tracing-endpoint", "otel-collector.local:4317"}, "otel-collector.local:4317", 0, ""},
		{[]string{"--tracing-endpoint", "localhost"}, "", 0, "--tracing-endpoint"},
		{[]string{"--tracing-endpoint", ":4317"}, "", 0, "--tracing-endpoint"},
		{[]string{"--tracing-endpoint", "localhost:0"}, "", 0, "--tracing-endpoint"},
		{[]string{"--tracing-endpoint", "http://localhost:4317"}, "", 0, "--tracing-endpoint"},
		{[]string{"--tracing-sampling-rate-per-million", "-1"}, "", 0, "--tracing-sampling-rate-per-million"},
		{[]string{"--tracing-sampling-rate-per-million", "1000001"}, "", 0, "--tracing-sampling-rate-per-million"},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: %v, want an error about %s", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.tracing.Endpoint != tt.endpoint || c.tracing.SamplingRatePerMillion != tt.rate {
			t.Errorf("%q: %+v, %v; want endpoint %q rate %d", tt.args, c.tracing, err, tt.endpoint, tt.rate)
		}
	}
}
