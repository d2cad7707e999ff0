package systemdunit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// UnitDirs are the system unit directories in systemd's order of precedence (those of
// them a package or an operator writes to).
var UnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// Service is a service unit as loaded: its files merged, nothing resolved yet.
type Service struct {
	Name  string
	Files []string // the unit file and then its drop-ins, in the order applied
	Wants []string
	After []string
	Type  string // Type=, "simple" when unset

	environment      []string // NAME=VALUE, in order
	environmentFiles []envFileRef
	execStartPre     []command
	execStart        []command
}

type envFileRef struct {
	path     string
	optional bool // "-" prefix
}

type command struct {
	words         []string
	ignoreFailure bool // "-" prefix
	where         string
}

// Command is a command line as systemd runs it.
type Command struct {
	Argv          []string
	IgnoreFailure bool
}

// Start is what systemd does to start a service: run each ExecStartPre command, then
// ExecStart, all with Env (on top of the manager's own environment).
type Start struct {
	Env          []string // NAME=VALUE, sorted
	ExecStartPre []Command
	ExecStart    Command
}

// Load reads the service name (e.g. "kubelet.service") and its drop-ins from UnitDirs;
// hostPath maps each absolute path systemd would read to where the caller keeps it.
func Load(name string, hostPath func(string) string) (*Service, error) {
	s := &Service{Name: name}
	for _, d := range UnitDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(hostPath(p)); err == nil {
			s.Files = append(s.Files, p)
			break
		}
	}
	if len(s.Files) == 0 {
		return nil, fmt.Errorf("unit %s not found in %v", name, UnitDirs)
	}
	dropIns := map[string]string{} // file name -> path, the first directory wins
	for _, d := range UnitDirs {
		dir := filepath.Join(d, name+".d")
		entries, err := os.ReadDir(hostPath(dir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if _, seen := dropIns[e.Name()]; !seen && strings.HasSuffix(e.Name(), ".conf") {
				dropIns[e.Name()] = filepath.Join(dir, e.Name())
			}
		}
	}
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.Files = append(s.Files, dropIns[n])
	}
	for _, f := range s.Files {
		b, err := os.ReadFile(hostPath(f))
		if err != nil {
			return nil, err
		}
		as, err := parseUnitFile(f, string(b))
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if err := s.apply(a); err != nil {
				return nil, fmt.Errorf("%s: %s=: %w", a.where, a.key, err)
			}
		}
	}
	if len(s.execStart) != 1 {
		return nil, fmt.Errorf("%s: %d ExecStart= commands after %v, a service of Type=simple or exec takes one", name, len(s.execStart), s.Files)
	}
	return s, nil
}

func (s *Service) apply(a assignment) error {
	switch a.section + "." + a.key {
	case "Unit.Wants":
		s.Wants = append(s.Wants, strings.Fields(a.value)...)
	case "Unit.After":
		s.After = append(s.After, strings.Fields(a.value)...)
	case "Service.Type":
		if !slices.Contains([]string{"simple", "exec", "notify"}, a.value) {
			return fmt.Errorf("service type %q is not implemented", a.value)
		}
		s.Type = a.value
	case "Service.Environment":
		if a.value == "" {
			s.environment = nil
			return nil
		}
		v, err := specifiers(a.value)
		if err != nil {
			return err
		}
		words, err := splitWords(v, unitSyntax)
		if err != nil {
			return err
		}
		for _, w := range words {
			name, _, ok := strings.Cut(w, "=")
			if !ok || !validName(name) {
				return fmt.Errorf("%q is not NAME=VALUE", w)
			}
		}
		s.environment = append(s.environment, words...)
	case "Service.EnvironmentFile":
		if a.value == "" {
			s.environmentFiles = nil
			return nil
		}
		v, err := specifiers(a.value)
		if err != nil {
			return err
		}
		ref := envFileRef{path: strings.TrimPrefix(v, "-"), optional: strings.HasPrefix(v, "-")}
		if !filepath.IsAbs(ref.path) {
			return fmt.Errorf("%q is not an absolute path", ref.path)
		}
		s.environmentFiles = append(s.environmentFiles, ref)
	case "Service.ExecStart", "Service.ExecStartPre":
		list := &s.execStart
		if a.key == "ExecStartPre" {
			list = &s.execStartPre
		}
		if a.value == "" {
			*list = nil
			return nil
		}
		c, err := parseCommand(a.value)
		if err != nil {
			return err
		}
		c.where = a.where
		*list = append(*list, c)
	}
	return nil
}

func parseCommand(value string) (command, error) {
	v, err := specifiers(value)
	if err != nil {
		return command{}, err
	}
	words, err := splitWords(v, unitSyntax)
	if err != nil {
		return command{}, err
	}
	if len(words) == 0 {
		return command{}, errors.New("no command")
	}
	var c command
	for len(words[0]) > 0 && strings.IndexByte("-@:+!", words[0][0]) >= 0 {
		if words[0][0] != '-' {
			return command{}, fmt.Errorf("prefix %q is not implemented", words[0][:1])
		}
		c.ignoreFailure = true
		words[0] = words[0][1:]
	}
	if !filepath.IsAbs(words[0]) {
		// systemd would search its own PATH; unit files here name the binary.
		return command{}, fmt.Errorf("%q is not an absolute path", words[0])
	}
	c.words = words
	return c, nil
}

// Start resolves the environment (reading the EnvironmentFile= files through hostPath) and
// the command lines.
func (s *Service) Start(hostPath func(string) string) (Start, error) {
	env := map[string]string{}
	for _, kv := range s.environment {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, f := range s.environmentFiles {
		b, err := os.ReadFile(hostPath(f.path))
		if errors.Is(err, fs.ErrNotExist) && f.optional {
			continue
		}
		if err != nil {
			return Start{}, fmt.Errorf("%s: EnvironmentFile=%s: %w", s.Name, f.path, err)
		}
		pairs, err := parseEnvFile(f.path, string(b))
		if err != nil {
			return Start{}, err
		}
		for _, p := range pairs {
			env[p[0]] = p[1]
		}
	}
	var st Start
	for k, v := range env {
		st.Env = append(st.Env, k+"="+v)
	}
	sort.Strings(st.Env)
	for _, c := range s.execStartPre {
		argv, err := expandArgv(c.words, env)
		if err != nil {
			return Start{}, fmt.Errorf("%s: ExecStartPre=: %w", c.where, err)
		}
		st.ExecStartPre = append(st.ExecStartPre, Command{Argv: argv, IgnoreFailure: c.ignoreFailure})
	}
	c := s.execStart[0]
	argv, err := expandArgv(c.words, env)
	if err != nil {
		return Start{}, fmt.Errorf("%s: ExecStart=: %w", c.where, err)
	}
	st.ExecStart = Command{Argv: argv, IgnoreFailure: c.ignoreFailure}
	return st, nil
}
