package systemdunit

import (
	"fmt"
	"strings"
)

// assignment is one Key=Value line of a unit file.
type assignment struct {
	section, key, value string
	where               string // file:line, for errors
}

// parseUnitFile splits a unit file into its assignments in order. A line ending in a
// backslash continues on the next (the backslash becomes a space); comment lines start
// with # or ;.
func parseUnitFile(name, text string) ([]assignment, error) {
	var out []assignment
	section := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if next != "" && (next[0] == '#' || next[0] == ';') {
				continue // comments inside a continued line are skipped, as systemd does
			}
			line = strings.TrimSuffix(line, `\`) + " " + next
		}
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("%s:%d: bad section header %q", name, n, line)
			}
			section = line[1 : len(line)-1]
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: not Key=Value: %q", name, n, line)
		}
		if section == "" {
			return nil, fmt.Errorf("%s:%d: %s outside a section", name, n, key)
		}
		out = append(out, assignment{section, strings.TrimSpace(key), strings.TrimSpace(value), fmt.Sprintf("%s:%d", name, n)})
	}
	return out, nil
}
