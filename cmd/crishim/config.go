package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crishim/crishim/cmd/internal/flagfile"
)

// defaultConfigPath is read when --config is not given and it exists; a
// variable so that tests never read the machine's.
var defaultConfigPath = "/etc/crishim/config.toml"

// source is where the settings come from: the flags given on the command
// line and a config file. Each load, at start and on every reload, reads
// the file anew and lays the flags over it.
type source struct {
	cli  []setting // in the order given
	file string    // "" for none
}

// setting is one flag as the command line gave it.
type setting struct{ name, value string }

// loaded is one load of the settings: the config, its flag set (whose
// values are those in force) and the file's bytes as read.
type loaded struct {
	cfg  *config
	fs   *pflag.FlagSet
	data []byte
}

// source says where the settings come from: the settings flags the command
// line set, and the config file.
func (o *rootOptions) source() source {
	var src source
	o.flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			src.cli = append(src.cli, setting{f.Name, f.Value.String()})
		}
	})
	src.file = o.configPath
	if o.configPath == defaultConfigPath {
		// Given or not, the default path is optional: a node without
		// the file runs on flags alone.
		if _, err := os.Stat(o.configPath); errors.Is(err, fs.ErrNotExist) {
			src.file = ""
		}
	}
	return src
}

// load reads the file's keys, then the command line's flags over them, and
// checks the result.
func (s source) load() (loaded, error) {
	c := &config{}
	ld := loaded{cfg: c, fs: c.flags()}
	if s.file != "" {
		data, err := flagfile.ReadFile(s.file)
		if err != nil {
			return ld, fmt.Errorf("--config: %w", err)
		}
		ld.data = data
		f, err := flagfile.Parse(s.file, data, ld.fs)
		if uk := (*flagfile.UnknownKeyError)(nil); errors.As(err, &uk) && removedKeys[uk.Key] != "" {
			return ld, fmt.Errorf("%s:%d: the %s key was %s; delete the key", uk.Path, uk.Line, uk.Key, removedKeys[uk.Key])
		}
		if err != nil {
			return ld, err
		}
		if err := f.Apply(ld.fs); err != nil {
			return ld, err
		}
	}
	for _, st := range s.cli {
		if err := ld.fs.Set(st.name, st.value); err != nil {
			return ld, fmt.Errorf("--%s %q: %w", st.name, st.value, err)
		}
	}
	if err := c.finish(ld.fs); err != nil {
		if s.file != "" {
			return ld, fmt.Errorf("%w (settings from the command line and %s)", err, s.file)
		}
		return ld, err
	}
	return ld, nil
}

// removedKeys are the settings a release removed, each with when and why: a
// file or command line that still names one is refused saying so and what
// to do, rather than as an unknown key.
var removedKeys = map[string]string{
	"relay": "removed in 0.1.0: crishim has one relay, the raw HTTP/2 one (the grpc-go relay is gone)",
	"notification-gc-after": "removed in 0.2.0: nodes no longer delete Notifications (crishim.io/v1alpha2); " +
		"crishim-notification-controller deletes them, and its --gc-after is the testing knob",
}

// removedFlag explains a flag of the command line that names a removed
// key; other errors pass as they are.
func removedFlag(err error) error {
	if ne := (*pflag.NotExistError)(nil); errors.As(err, &ne) {
		if msg := removedKeys[ne.GetSpecifiedName()]; msg != "" {
			return fmt.Errorf("--%s was %s; drop the flag", ne.GetSpecifiedName(), msg)
		}
	}
	return err
}

// values are the settings in force, by key, as the config file spells them.
func (ld loaded) values() map[string]string {
	v := map[string]string{}
	ld.fs.VisitAll(func(f *pflag.Flag) { v[f.Name] = f.Value.String() })
	return v
}

const defaultHeader = `crishim configuration (TOML). Keys are crishim's flag names (crishim --help,
docs/flags.md); a flag given on the command line overrides its key here. Every key is
shown commented out at its default: uncomment and edit the ones to change.
On SIGHUP (systemctl reload crishim) or when this file changes, crishim reloads
the keys marked reloadable; the others take a restart, which crishim logs.`

func newConfigCommand(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Write the default config file, or the settings crishim would run with",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{errors.New("config: want a command: default or dump")}
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "default",
		Short: "Print a config file with every key commented out at its default",
		Long: `Print a config file with every key commented out at its default, below its
meaning. It is valid input for --config as it is, and stays so as keys are
uncommented and edited.`,
		Example: "  crishim config default > /etc/crishim/config.toml",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return flagfile.WriteDefault(cmd.OutOrStdout(), defaultHeader, (&config{}).flags())
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "dump",
		Short: "Print the settings crishim would run with: the config file's, with the command line's over them",
		Long: `Print the settings crishim would run with, from the config file (--config) and the
flags given, as a config file that sets every key. Defaults that depend on other
settings (--image-endpoint, --containerd-address, --node-name) are shown resolved.
A bad file or flag is reported as crishim would at start (exit 2); so is a file the
settings name that start would fail on (exit 1): an audit log that cannot be
created or written, a TLS certificate or kubeconfig that cannot be read.`,
		Example: `  crishim --config /etc/crishim/config.toml config dump
  crishim --config /etc/crishim/config.toml --log-level debug config dump`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src := opts.source()
			ld, err := src.load()
			if err != nil {
				return usageError{err}
			}
			// What start would refuse before serving: exit 1, as start.
			if err := preflight(ld.cfg); err != nil {
				return err
			}
			from := "defaults and the command line"
			if src.file != "" {
				from = src.file + " and the command line"
			}
			return flagfile.WriteValues(cmd.OutOrStdout(), "crishim settings in effect, from "+from+".", ld.fs)
		},
	})
	return cmd
}
