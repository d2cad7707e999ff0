package flagfile

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestWriteDefaultLeavesOutHiddenFlags: a flag hidden from --help (for tests) is not offered
// in the default file, while a dump of the values in force names it.
func TestWriteDefaultLeavesOutHiddenFlags(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("shown", "a", "a flag for operators")
	fs.Duration("for-tests", 0, "a flag for tests")
	if err := fs.MarkHidden("for-tests"); err != nil {
		t.Fatal(err)
	}
	var def, dump strings.Builder
	if err := WriteDefault(&def, "header", fs); err != nil {
		t.Fatal(err)
	}
	if err := WriteValues(&dump, "header", fs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def.String(), "# shown = ") || strings.Contains(def.String(), "for-tests") {
		t.Errorf("default file:\n%s\nwant shown and not for-tests", def.String())
	}
	if !strings.Contains(dump.String(), "for-tests = ") {
		t.Errorf("dump:\n%s\nwant for-tests too", dump.String())
	}
}
