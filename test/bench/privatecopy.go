package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// privateCopy copies the binary bin into dir as the process name's own, and
// returns the copy's path. Every process of a run starts from a copy of its
// own, so that no two share the pages of their code: the pipe and the naive
// forwarder are this benchmark's binary re-invoked, and the same binary as
// the client, all Go's runtime, netpoll and syscall paths included, is kept
// warm in the shared caches by the client between calls; crishim's grpc
// relay shared crishim's. A process whose code another keeps warm pays less
// for every cold wake-up than it would alone, as the kubelet's proxy is
// (docs/performance.md, "the pipe's code was the client's").
func privateCopy(bin, dir, name string) (string, error) {
	src, err := os.Open(bin)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	defer src.Close()
	dst := filepath.Join(dir, name+".bin")
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if _, err := io.Copy(f, src); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("%s: copy %s: %w", name, bin, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return dst, nil
}
