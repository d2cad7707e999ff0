package packaging

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLicense: LICENSE is the Apache License 2.0, and the .deb's copyright file says so in
// Debian's machine-readable format (DEP-5): the Format line first, a Files: * paragraph with
// a Copyright and License: Apache-2.0, and a stand-alone License paragraph for every
// license a Files paragraph names.
func TestLicense(t *testing.T) {
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(license)), " ")
	for _, want := range []string{"Apache License Version 2.0, January 2004", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(text, want) {
			t.Errorf("LICENSE lacks %q: not the Apache License 2.0", want)
		}
	}

	b, err := os.ReadFile("../../packaging/deb/copyright")
	if err != nil {
		t.Fatal(err)
	}
	paragraphs := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	if !strings.HasPrefix(paragraphs[0], "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n") {
		t.Errorf("packaging/deb/copyright does not start with DEP-5's Format line:\n%s", paragraphs[0])
	}
	field := func(p, name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `: *(.*)$`).FindStringSubmatch(p)
		if m == nil {
			return ""
		}
		return strings.TrimSpace(m[1])
	}
	var named, standalone []string
	for _, p := range paragraphs[1:] {
		lic := field(p, "License")
		if lic == "" {
			t.Errorf("paragraph without License:\n%s", p)
			continue
		}
		if field(p, "Files") == "" {
			standalone = append(standalone, lic)
			continue
		}
		if field(p, "Copyright") == "" {
			t.Errorf("Files paragraph without Copyright:\n%s", p)
		}
		named = append(named, lic)
		// The short name alone, the text in its own paragraph.
		if strings.Contains(p, "\nLicense: "+lic+"\n ") {
			t.Errorf("Files paragraph carries the license text; DEP-5 wants it in a stand-alone License paragraph:\n%s", p)
		}
	}
	if len(named) == 0 || named[0] != "Apache-2.0" {
		t.Errorf("Files: * is licensed %v, want Apache-2.0", named)
	}
	for _, lic := range named {
		if !slices.Contains(standalone, lic) {
			t.Errorf("no stand-alone License: %s paragraph (have %v)", lic, standalone)
		}
	}
}
