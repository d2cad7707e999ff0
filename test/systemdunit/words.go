package systemdunit

import (
	"fmt"
	"strings"
)

const whitespace = " \t\n\r"

// splitMode says how splitWords treats backslashes and unterminated quotes.
type splitMode int

const (
	// unitSyntax is how a unit file's command lines and Environment= values are split
	// (EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE): C escapes, a missing closing quote is an error.
	unitSyntax splitMode = iota
	// valueSyntax is how a $NAME word's value is split (EXTRACT_UNQUOTE|EXTRACT_RELAX): a
	// backslash takes the next character as it is, a missing closing quote ends the word.
	valueSyntax
)

// splitWords splits s at whitespace into words, removing the quotes ('...' and "...",
// also in the middle of a word) and resolving backslashes per mode.
func splitWords(s string, mode splitMode) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote byte // the open quote, or 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 == len(s) {
				if mode == valueSyntax {
					inWord = true
					continue
				}
				return nil, fmt.Errorf("%q ends in a backslash", s)
			}
			i++
			if mode == valueSyntax {
				w.WriteByte(s[i])
			} else {
				r, err := cEscape(s[i])
				if err != nil {
					return nil, fmt.Errorf("%q: %w", s, err)
				}
				w.WriteByte(r)
			}
			inWord = true
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case strings.IndexByte(whitespace, c) >= 0:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 && mode == unitSyntax {
		return nil, fmt.Errorf("%q: unterminated %c quote", s, quote)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// cEscape is the character a backslash followed by c stands for in a unit file. The
// numeric (\x, \0, \u) forms are refused: nothing here needs them.
func cEscape(c byte) (byte, error) {
	switch c {
	case 'a':
		return '\a', nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'v':
		return '\v', nil
	case 's':
		return ' ', nil
	case '\\', '"', '\'', ' ':
		return c, nil
	}
	return 0, fmt.Errorf(`unsupported escape \%c`, c)
}

// specifiers resolves the %-specifiers systemd expands in Exec*=, Environment= and
// EnvironmentFile= values: only %% is supported.
func specifiers(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		return "", fmt.Errorf("%q: unsupported %%-specifier", s)
	}
	return b.String(), nil
}

// validName reports whether name is a valid environment variable name.
func validName(name string) bool {
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// expandArgv replaces the variables of a command line's words with their values in env.
func expandArgv(words []string, env map[string]string) ([]string, error) {
	var argv []string
	for _, w := range words {
		if len(w) > 1 && w[0] == '$' && w[1] != '{' && w[1] != '$' {
			// As systemd: a lookup of a name that is not valid finds nothing.
			v, ok := env[w[1:]]
			if !ok {
				continue
			}
			split, err := splitWords(v, valueSyntax)
			if err != nil {
				return nil, err
			}
			argv = append(argv, split...)
			continue
		}
		x, err := expandWord(w, env)
		if err != nil {
			return nil, err
		}
		argv = append(argv, x)
	}
	return argv, nil
}

// expandWord replaces ${NAME} (by the value, unset is empty) and $$ (by $) within a word; a
// $ followed by anything else stays as it is.
func expandWord(w string, env map[string]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		if w[i] != '$' || i+1 == len(w) {
			b.WriteByte(w[i])
			continue
		}
		switch w[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(w[i:], '}')
			if end < 0 {
				b.WriteString(w[i:]) // unterminated: systemd keeps the text
				return b.String(), nil
			}
			name := w[i+2 : i+end]
			if !validName(name) {
				return "", fmt.Errorf("%q: unsupported ${%s}", w, name)
			}
			b.WriteString(env[name])
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), nil
}
