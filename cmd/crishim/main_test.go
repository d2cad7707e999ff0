package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMain(m *testing.M) {
	// Never the machine's /etc/crishim/config.toml.
	dir, err := os.MkdirTemp("", "crishim-test")
	if err != nil {
		panic(err)
	}
	defaultConfigPath = filepath.Join(dir, "absent.toml")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// parseFlags loads the settings of a command line, as crishim does at start.
func parseFlags(args []string) (config, error) {
	ld, err := loadArgs(args)
	if err != nil {
		return config{}, err
	}
	return *ld.cfg, nil
}

func loadArgs(args []string) (loaded, error) {
	opts := newRootOptions()
	root := newRootCommand(opts)
	if err := root.ParseFlags(args); err != nil {
		return loaded{}, err
	}
	return opts.source().load()
}
