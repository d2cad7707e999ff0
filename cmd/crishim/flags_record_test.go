package main

import (
	"strings"
	"testing"

	"github.com/crishim/crishim/audit"
)

func TestRecordFlags(t *testing.T) {
	tests := []struct {
		args    []string
		mode    audit.RecordMode
		wantErr string
	}{
		{nil, audit.RecordNone, ""},
		{[]string{"--record-sessions", "tty", "--record-input"}, audit.RecordTTY, ""},
		{[]string{"--record-sessions", "all"}, audit.RecordAll, ""},
		{[]string{"--record-sessions", "some"}, "", "--record-sessions"},
		{[]string{"--record-max-bytes", "-1"}, "", "--record-max-bytes"},
		{[]string{"--record-max-total-bytes", "-1"}, "", "--record-max-total-bytes"},
		{[]string{"--record-dir", ""}, "", "--record-dir"},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: %v, want an error about %s", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.record.Mode != tt.mode || c.record.Dir != "/var/log/crishim/sessions" || c.record.MaxTotalBytes != 1<<30 {
			t.Errorf("%q: %+v, %v; want mode %q in the default dir", tt.args, c.record, err, tt.mode)
		}
	}
}
