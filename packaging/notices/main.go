// Command notices writes the licence and notice files of everything linked into crishim's
// binaries, for the release tarballs and the .deb (packaging/release.sh,
// packaging/deb/build.sh): a static Go binary carries the code of every module it links,
// and their licences (BSD and MIT: "reproduce the above copyright notice"; Apache-2.0 §4(d):
// "a readable copy of the attribution notices contained within such NOTICE file") ask that a
// binary distribution carry their texts.
//
//	go run ./packaging/notices --out FILE BINARY...
//
// The modules are read from the binaries' own build information (what was linked, not what
// go.mod lists), their files from the module cache (`go list -m -json all`: the modules must
// be downloaded, as they are after the build). The output depends only on those files: the
// same commit gives the same bytes. A linked module without any licence file is an error.
package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// licenceFile matches the file names that carry a module's licence or notices, at its root.
var licenceFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents)([.-].*)?$`)

type module struct {
	Path    string
	Version string
	Dir     string
	Replace *module
}

func main() {
	out := flag.String("out", "", "file to write (required)")
	goCmd := flag.String("go", "go", "the go command, for the module cache and the standard library")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: notices --out FILE BINARY...")
		os.Exit(2)
	}
	if err := run(*out, *goCmd, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
}

func run(out, goCmd string, binaries []string) error {
	linked, goVersion, err := linkedModules(binaries)
	if err != nil {
		return err
	}
	dirs, err := moduleDirs(goCmd)
	if err != nil {
		return err
	}
	goroot, err := exec.Command(goCmd, "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "crishim's binaries (%s) are built with Go and link the modules below, each\n", strings.Join(baseNames(binaries), ", "))
	b.WriteString("under its own licence. Their licence and notice files follow as the modules ship them.\n")
	if err := section(&b, "Go standard library "+goVersion, strings.TrimSpace(string(goroot))); err != nil {
		return err
	}
	for _, m := range linked {
		dir := dirs[m.Path+"@"+m.Version]
		if dir == "" {
			return fmt.Errorf("%s@%s is not in the module cache (go mod download %s)", m.Path, m.Version, m.Path)
		}
		if err := section(&b, m.Path+" "+m.Version, dir); err != nil {
			return err
		}
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}

// linkedModules is the union of the binaries' dependencies, by path, and the Go version
// that built them.
func linkedModules(binaries []string) ([]module, string, error) {
	seen := map[string]module{}
	var goVersion string
	for _, bin := range binaries {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", bin, err)
		}
		goVersion = info.GoVersion
		for _, d := range info.Deps {
			m := module{Path: d.Path, Version: d.Version}
			if d.Replace != nil {
				m = module{Path: d.Replace.Path, Version: d.Replace.Version}
			}
			seen[m.Path+"@"+m.Version] = m
		}
	}
	mods := make([]module, 0, len(seen))
	for _, m := range seen {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b module) int { return strings.Compare(a.Path+"@"+a.Version, b.Path+"@"+b.Version) })
	return mods, goVersion, nil
}

// moduleDirs maps path@version of the build list's modules to their directory.
func moduleDirs(goCmd string) (map[string]string, error) {
	cmd := exec.Command(goCmd, "list", "-m", "-json", "all")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m -json all: %w: %s", err, stderr.Bytes())
	}
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var m module
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -m -json all: %w", err)
		}
		if r := m.Replace; r != nil {
			dirs[r.Path+"@"+r.Version] = r.Dir
			continue
		}
		dirs[m.Path+"@"+m.Version] = m.Dir
	}
	return dirs, nil
}

// section appends the licence and notice files at dir's root under a heading.
func section(b *bytes.Buffer, heading, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && licenceFile.MatchString(e.Name()) {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		return fmt.Errorf("%s: no licence file in %s", heading, dir)
	}
	slices.Sort(files)
	fmt.Fprintf(b, "\n%s\n%s\n", strings.Repeat("=", 78), heading)
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "\n--- %s\n\n%s\n", f, bytes.TrimRight(text, "\n"))
	}
	return nil
}

func baseNames(paths []string) []string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	return names
}
