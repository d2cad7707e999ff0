// Package flagfile reads a program's settings from a TOML file whose keys are
// the program's flag names, so that every flag has a key by construction and
// a value from the file is checked by the same pflag.Value.Set as the command
// line. It also writes such files: a commented default one and a dump of the
// values in force.
package flagfile

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/spf13/pflag"

	"github.com/crishim/crishim/regularfile"
)

// Version is the file format's version, the value of its version key. It
// changes only if a key changes meaning; new keys do not change it.
const Version = 1

// versionKey is no flag: it says which format the file is written in, as
// containerd's config.toml does.
const versionKey = "version"

// File is a parsed settings file: a value for some flags, each with its line.
type File struct {
	Path    string
	Entries []Entry // in file order
}

// Entry is one key of the file.
type Entry struct {
	Key   string // the flag's name
	Value string // as the command line would give it to Value.Set
	Line  int
}

// MaxFileSize is the largest settings file ReadFile reads: a config file is
// a few kilobytes, and one read every few seconds must stay cheap.
const MaxFileSize = 1 << 20

// ReadFile reads a settings file. It refuses, naming the file, anything but
// a regular file (a FIFO would block the read for ever, /dev/zero would
// never end) and a file larger than MaxFileSize, and never waits: the open
// does not block (O_NONBLOCK) and what is read is bounded even if the file
// grows meanwhile.
func ReadFile(path string) ([]byte, error) {
	f, err := regularfile.Open(path, os.O_RDONLY, 0)
	if nr := (*regularfile.NotRegularError)(nil); errors.As(err, &nr) {
		return nil, fmt.Errorf("%w; a config file must be one", err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	tooBig := fmt.Errorf("%s is larger than %d bytes (1 MiB), the most a config file may have", path, MaxFileSize)
	if fi.Size() > MaxFileSize {
		return nil, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, tooBig
	}
	return data, nil
}

// Parse parses data, the file at path as ReadFile read it, against fs:
// every key must name a flag of fs and hold a value of the flag's type.
// Errors name the file, the line and the key.
func Parse(path string, data []byte, fs *pflag.FlagSet) (*File, error) {
	var values map[string]any
	if err := toml.Unmarshal(data, &values); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, fmt.Errorf("%s:%d: %s", path, line, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lines, err := keyLines(path, data)
	if err != nil {
		return nil, err
	}
	f := &File{Path: path}
	version := false
	for _, kl := range lines {
		v := values[kl.key]
		if kl.key == versionKey {
			if n, ok := v.(int64); !ok || n != Version {
				return nil, fmt.Errorf("%s:%d: %s = %v: this crishim reads version = %d", path, kl.line, versionKey, render(v), Version)
			}
			version = true
			continue
		}
		fl := fs.Lookup(kl.key)
		if fl == nil {
			return nil, &UnknownKeyError{Path: path, Line: kl.line, Key: kl.key, hint: suggest(kl.key, fs)}
		}
		s, err := valueString(fl, v)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: key %q: %w", path, kl.line, kl.key, err)
		}
		f.Entries = append(f.Entries, Entry{Key: kl.key, Value: s, Line: kl.line})
	}
	if !version {
		return nil, fmt.Errorf("%s: no %s key: the file must say which format it is written in (%s = %d)", path, versionKey, versionKey, Version)
	}
	return f, nil
}

// UnknownKeyError is a key of the file that names no flag: a typo, or a
// key a later version removed, which the program may explain better.
type UnknownKeyError struct {
	Path string
	Line int
	Key  string
	hint string // the flag it may have meant
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("%s:%d: unknown key %q%s", e.Path, e.Line, e.Key, e.hint)
}

// Apply sets fs's flags to the file's values with their Value.Set, which
// checks them as on the command line, and marks them as set (Changed).
func (f *File) Apply(fs *pflag.FlagSet) error {
	for _, e := range f.Entries {
		fl := fs.Lookup(e.Key)
		if fl == nil {
			return fmt.Errorf("%s:%d: unknown key %q", f.Path, e.Line, e.Key)
		}
		if err := fl.Value.Set(e.Value); err != nil {
			return fmt.Errorf("%s:%d: key %q: %q: %w", f.Path, e.Line, e.Key, e.Value, err)
		}
		fl.Changed = true
	}
	return nil
}

type keyLine struct {
	key  string
	line int
}

// keyLines lists the top-level keys with their lines, refusing the TOML
// shapes that no flag has: tables and dotted keys.
func keyLines(path string, data []byte) ([]keyLine, error) {
	p := unstable.Parser{}
	p.Reset(data)
	var out []keyLine
	for p.NextExpression() {
		n := p.Expression()
		if n.Kind != unstable.KeyValue && n.Kind != unstable.Table && n.Kind != unstable.ArrayTable {
			continue
		}
		it := n.Key()
		it.Next()
		k := it.Node()
		line := p.Shape(k.Raw).Start.Line
		if n.Kind != unstable.KeyValue {
			return nil, fmt.Errorf("%s:%d: table [%s]: keys are flag names at the top level; no tables", path, line, k.Data)
		}
		if !it.IsLast() {
			return nil, fmt.Errorf("%s:%d: dotted key %s: keys are flag names, with dashes", path, line, p.Raw(n.Raw))
		}
		out = append(out, keyLine{key: string(k.Data), line: line})
	}
	if err := p.Error(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// valueString checks a TOML value against the flag's type and spells it as
// the command line would.
func valueString(fl *pflag.Flag, v any) (string, error) {
	switch kind(fl) {
	case kindBool:
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b), nil
		}
		return "", fmt.Errorf("want true or false, got %s", render(v))
	case kindInt:
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10), nil
		}
		return "", fmt.Errorf("want an integer, got %s", render(v))
	case kindFloat:
		switch n := v.(type) {
		case int64:
			return strconv.FormatInt(n, 10), nil
		case float64:
			if !math.IsInf(n, 0) && !math.IsNaN(n) {
				return strconv.FormatFloat(n, 'g', -1, 64), nil
			}
		}
		return "", fmt.Errorf("want a number, got %s", render(v))
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("want a string (in quotes), got %s", render(v))
}

// render spells a decoded TOML value with its type, for errors.
func render(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T %v", v, v)
}

type valueKind int

const (
	kindString valueKind = iota
	kindBool
	kindInt
	kindFloat
)

// kind says how a flag's value is written in TOML, from its pflag type:
// durations and anything not a number or a boolean are strings.
func kind(fl *pflag.Flag) valueKind {
	switch fl.Value.Type() {
	case "bool":
		return kindBool
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return kindInt
	case "float32", "float64":
		return kindFloat
	}
	return kindString
}

// suggest names the flag a mistyped key probably meant.
func suggest(key string, fs *pflag.FlagSet) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if d := distance(key, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return " (keys are the flag names of --help)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
