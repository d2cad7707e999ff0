package flagfile

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/pflag"
)

// WriteDefault writes a file that sets only the version: every flag of fs
// follows, commented out at its default, below its usage. Uncommenting a
// line changes nothing until its value is edited; an upgrade that changes a
// default takes effect in a file left as written. Hidden flags (for tests)
// are left out, as from --help; the file still accepts their keys.
func WriteDefault(w io.Writer, header string, fs *pflag.FlagSet) error {
	var b strings.Builder
	comment(&b, header)
	fmt.Fprintf(&b, "%s = %d\n", versionKey, Version)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		b.WriteString("\n")
		comment(&b, f.Usage)
		fmt.Fprintf(&b, "# %s = %s\n", f.Name, quote(f, f.DefValue))
	})
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteValues writes a file that sets every flag of fs to its current value.
func WriteValues(w io.Writer, header string, fs *pflag.FlagSet) error {
	var b strings.Builder
	comment(&b, header)
	fmt.Fprintf(&b, "%s = %d\n", versionKey, Version)
	fs.VisitAll(func(f *pflag.Flag) {
		fmt.Fprintf(&b, "%s = %s\n", f.Name, quote(f, f.Value.String()))
	})
	_, err := io.WriteString(w, b.String())
	return err
}

// comment writes text as # lines of at most about 100 columns.
func comment(b *strings.Builder, text string) {
	for _, para := range strings.Split(text, "\n") {
		line := "#"
		for _, word := range strings.Fields(para) {
			if len(line) > 1 && len(line)+1+len(word) > 100 {
				b.WriteString(line + "\n")
				line = "#"
			}
			line += " " + word
		}
		b.WriteString(line + "\n")
	}
}

// quote writes a flag's value as TOML: numbers and booleans bare, the rest
// as a basic string.
func quote(f *pflag.Flag, v string) string {
	switch kind(f) {
	case kindBool:
		if _, err := strconv.ParseBool(v); err == nil {
			return v
		}
	case kindInt, kindFloat:
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			return v
		}
	}
	return basicString(v)
}

// basicString quotes s as a TOML basic string, whose escapes are fewer
// than Go's.
func basicString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
