package streaming

import "testing"

func TestParseExitStatus(t *testing.T) {
	tests := []struct {
		in   string
		code int32
		ok   bool
	}{
		{`{"metadata":{},"status":"Success"}`, 0, true},
		{`{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]}}`, 7, true},
		{`{"status":"Failure","reason":"InternalError"}`, 0, false},
		{``, 0, false},
		{`not json`, 0, false},
	}
	for _, tt := range tests {
		code, ok := parseExitStatus([]byte(tt.in))
		if code != tt.code || ok != tt.ok {
			t.Errorf("parseExitStatus(%q) = %d, %v; want %d, %v", tt.in, code, ok, tt.code, tt.ok)
		}
	}
}
