package packaging

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameTheGoVersion: README.md and docs/install.md say which Go builds crishim, and
// it is the one go.mod asks for.
func TestDocsNameTheGoVersion(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	want := "Go " + string(m[1]) + " or later"
	for _, doc := range []string{"../../README.md", "../../docs/install.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		// Markdown wraps lines anywhere.
		if text := strings.Join(strings.Fields(string(b)), " "); !strings.Contains(text, want) {
			t.Errorf("%s does not say %q (go.mod's go line)", doc, want)
		}
	}
}
