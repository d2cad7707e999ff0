package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"
)

// preflight checks, changing nothing, the files the settings name that
// start would otherwise find wrong part-way: the audit log's file or
// directory, the streaming TLS certificate and key, the kubeconfig. Start
// runs it before it opens anything, and `crishim config dump` runs it, so
// that a dump that succeeds describes a configuration that starts.
func preflight(c *config) error {
	var errs []error
	if p := c.audit.Path; p != "" && p != "-" {
		errs = append(errs, checkAuditPath(p))
	}
	if c.streaming.Address != "" && c.streaming.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.streaming.TLSCertFile, c.streaming.TLSKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--streaming-tls-cert %s, --streaming-tls-key %s: %w", c.streaming.TLSCertFile, c.streaming.TLSKeyFile, err))
		}
	}
	if k := c.notifications.kubeconfig; k != "" {
		if _, err := clientcmd.BuildConfigFromFlags("", k); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig %q: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// checkAuditPath says whether crishim could create or append to the audit
// log at path: an existing regular file it may write, or a directory it may
// create it in (crishim does not create the directory).
func checkAuditPath(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("--audit-log: %s is not a regular file; the audit log must be a file", path)
	case err == nil:
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("--audit-log: %s is not writable: %w", path, err)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--audit-log: %w", err)
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--audit-log: directory %s does not exist: create it (mode 0700) or name another", dir)
	case err != nil:
		return fmt.Errorf("--audit-log: %w", err)
	case !di.IsDir():
		return fmt.Errorf("--audit-log: %s is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("--audit-log: cannot create %s in %s: %w", filepath.Base(path), dir, err)
	}
	return nil
}
