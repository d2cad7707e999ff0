// Command tarball writes a reproducible .tar.gz for `make release`: the same files give
// the same bytes on any machine, whatever the files' mtimes, owners or the order they
// are named in. Every entry is under one top directory, sorted by name, owned by 0:0,
// dated --mtime, mode 0755 when the file is executable and 0644 otherwise; the gzip
// header carries no name and no time.
//
//	go run ./test/tarball --out crishim-0.1.0-linux-amd64.tar.gz --dir crishim-0.1.0-linux-amd64 \
//	    --mtime "$SOURCE_DATE_EPOCH" bin/crishim LICENSE README.md=README
//
// An argument SRC=NAME stores the file SRC as NAME.
package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "", "the .tar.gz to write")
	dir := flag.String("dir", "", "the top directory every entry is under")
	mtime := flag.Int64("mtime", 0, "every entry's modification time, seconds since the epoch (SOURCE_DATE_EPOCH)")
	flag.Parse()
	if *out == "" || *dir == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: tarball --out FILE.tar.gz --dir TOP [--mtime SECONDS] SRC[=NAME]...")
		os.Exit(2)
	}
	if err := write(*out, *dir, time.Unix(*mtime, 0), flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "tarball:", err)
		os.Exit(1)
	}
}

type entry struct{ src, name string }

func write(out, dir string, mtime time.Time, args []string) (err error) {
	entries := make([]entry, 0, len(args))
	for _, a := range args {
		src, name, ok := strings.Cut(a, "=")
		if !ok {
			name = filepath.Base(src)
		}
		if name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("%q: a name is one path element", a)
		}
		entries = append(entries, entry{src, name})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return fmt.Errorf("two files named %s", entries[i].name)
		}
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			err = errors.Join(err, os.Remove(out))
		}
	}()
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	hdr := tar.Header{Format: tar.FormatUSTAR, ModTime: mtime, Uname: "root", Gname: "root"}
	top := hdr
	top.Typeflag, top.Name, top.Mode = tar.TypeDir, dir+"/", 0o755
	if err := tw.WriteHeader(&top); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	for _, e := range entries {
		if err := addFile(tw, hdr, path.Join(dir, e.name), e.src); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// addFile stores the regular file src as name, with hdr's owner and time.
func addFile(tw *tar.Writer, hdr tar.Header, name, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	hdr.Typeflag, hdr.Name, hdr.Size, hdr.Mode = tar.TypeReg, name, info.Size(), 0o644
	if info.Mode()&0o111 != 0 {
		hdr.Mode = 0o755
	}
	if err := tw.WriteHeader(&hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}
