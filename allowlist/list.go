package allowlist

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// List is a set of patterns; an image is allowed when one of its names
// matches one of them.
type List struct {
	patterns []Pattern
}

// Parse reads patterns separated by commas, newlines or spaces; # starts a
// comment running to the end of its line (in files).
func Parse(r io.Reader) (*List, error) {
	l := &List{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		for _, f := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			p, err := ParsePattern(f)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			l.patterns = append(l.patterns, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return l, nil
}

// ParseFlag reads the value of --debug-image-allowlist.
func ParseFlag(value string) (*List, error) {
	l, err := Parse(strings.NewReader(value))
	if err != nil {
		// One line: its number says nothing.
		return nil, fmt.Errorf("--debug-image-allowlist: %w", unwrapLine(err))
	}
	return l, nil
}

func unwrapLine(err error) error {
	if u, ok := err.(interface{ Unwrap() error }); ok && u.Unwrap() != nil {
		return u.Unwrap()
	}
	return err
}

// Len is the number of patterns.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.patterns)
}

// Match returns the first pattern matching one of names (image names as
// ParseName reads them; IDs are skipped), and whether there was one.
func (l *List) Match(names ...string) (Pattern, bool) {
	for _, n := range names {
		ref, ok := ParseName(n)
		if !ok {
			continue
		}
		for _, p := range l.patterns {
			if p.Match(ref) {
				return p, true
			}
		}
	}
	return Pattern{}, false
}
