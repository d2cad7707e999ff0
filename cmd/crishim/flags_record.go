package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/crishim/crishim/audit"
)

// recordConfig holds the flags of recorded sessions; they configure the
// streaming server, which records.
type recordConfig struct {
	audit.RecordConfig
	mode string
}

func (c *recordConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.mode, "record-sessions", string(audit.RecordNone), "record exec and attach sessions as asciicast v2 files: none, tty (sessions with a terminal) or all; a pod's annotation "+audit.RecordAnnotation+" may ask for more")
	fs.StringVar(&c.Dir, "record-dir", "/var/log/crishim/sessions", "directory of session recordings (created 0700; files 0600)")
	fs.Int64Var(&c.MaxBytes, "record-max-bytes", 100<<20, "largest recording of one session in bytes; then recording stops, the session does not (0: no limit)")
	fs.Int64Var(&c.MaxTotalBytes, "record-max-total-bytes", 1<<30, "most the recording directory holds, all files together, in bytes; then new sessions are not recorded and running recordings stop (counted in crishim_record_errors_total), nothing is deleted (0: no limit)")
	fs.BoolVar(&c.Input, "record-input", false, "record what is typed too (passwords are typed into terminals)")
	checkValue(fs, "record-sessions", func(s string) error {
		_, err := audit.ParseRecordMode(s)
		return err
	})
	checkValue(fs, "record-max-bytes", nonNegative)
	checkValue(fs, "record-max-total-bytes", nonNegative)
	checkValue(fs, "record-dir", func(s string) error {
		if s == "" {
			return fmt.Errorf("must not be empty")
		}
		return nil
	})
}

func (c *recordConfig) finish() error {
	m, err := audit.ParseRecordMode(c.mode)
	if err != nil {
		return fmt.Errorf("--record-sessions %w", err)
	}
	c.Mode = m
	return nil
}
