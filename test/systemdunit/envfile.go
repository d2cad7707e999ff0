package systemdunit

import (
	"fmt"
	"strings"
)

// parseEnvFile reads an EnvironmentFile= file the way systemd does for the forms found in
// the wild: NAME=VALUE lines, blank lines, comments starting with # or ;. A value may be
// unquoted (trailing whitespace dropped, a backslash takes the next character), in double
// quotes (a backslash escapes " \ ` $ and a newline) or in single quotes (taken as it is);
// a quoted value may span lines. Values are not expanded. Any other line is refused with
// its number, where systemd would skip it with a warning nobody reads.
func parseEnvFile(name, text string) ([][2]string, error) {
	var out [][2]string
	line := 1
	for len(text) > 0 {
		// Leading whitespace and empty lines.
		if c := text[0]; c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			if c == '\n' {
				line++
			}
			text = text[1:]
			continue
		}
		if text[0] == '#' || text[0] == ';' {
			end := strings.IndexByte(text, '\n')
			if end < 0 {
				break
			}
			text = text[end:]
			continue
		}
		eq := strings.IndexAny(text, "=\n")
		if eq < 0 || text[eq] != '=' {
			return nil, fmt.Errorf("%s:%d: not NAME=VALUE", name, line)
		}
		key := strings.TrimRight(text[:eq], " \t")
		if !validName(key) {
			return nil, fmt.Errorf("%s:%d: %q is no variable name", name, line, key)
		}
		start := line
		value, rest, lines, err := envValue(strings.TrimLeft(text[eq+1:], " \t"))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", name, start, key, err)
		}
		line += lines
		out = append(out, [2]string{key, value})
		text = rest
	}
	return out, nil
}

// envValue reads one value up to the end of its line and returns it, the text after it and
// the number of newlines it consumed.
func envValue(s string) (value, rest string, lines int, err error) {
	var b strings.Builder
	var quote byte
	trailing := 0 // unquoted whitespace at the end of b, dropped at the end of the line
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
				continue
			}
			if c == '\n' {
				lines++
			}
			b.WriteByte(c)
		case quote == '"':
			if c == '"' {
				quote = 0
				continue
			}
			if c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\`$\n", s[i+1]) >= 0 {
				i++
				if s[i] == '\n' {
					lines++
					continue
				}
				b.WriteByte(s[i])
				continue
			}
			if c == '\n' {
				lines++
			}
			b.WriteByte(c)
		case c == '\n':
			return b.String()[:b.Len()-trailing], s[i:], lines, nil
		case c == '\'' || c == '"':
			quote, trailing = c, 0
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] == '\n' {
				lines++
				continue
			}
			b.WriteByte(s[i])
			trailing = 0
		case c == ' ' || c == '\t' || c == '\r':
			b.WriteByte(c)
			trailing++
		default:
			b.WriteByte(c)
			trailing = 0
		}
	}
	if quote != 0 {
		return "", "", 0, fmt.Errorf("unterminated %c quote", quote)
	}
	return b.String()[:b.Len()-trailing], "", lines, nil
}
