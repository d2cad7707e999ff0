package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
)

// usageError is a bad flag, argument or setting: exit 2, as for bad flags
// before crishim had commands.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// errLogged: crishim failed while serving and has logged why; exit 1.
var errLogged = errors.New("crishim failed")

// rootOptions are the flags of crishim itself, beside the settings.
type rootOptions struct {
	settings    *config                // the command line's values, before the file
	sections    *cliflag.NamedFlagSets // the settings' flags by feature, for --help
	flags       *pflag.FlagSet         // the same flags in one set, bound to settings
	configPath  string
	showVersion bool
}

const rootLong = `crishim is a CRI interposer: the kubelet talks to its socket (--listen) as if it
were the container runtime, and crishim forwards every call to the runtime
(--runtime-endpoint), intercepting the few where it adds something: PID namespace
TARGET for debug containers, stop signals, exec/attach/port-forward streaming,
notifiers, the debug image allowlist and the audit log.

Without a command, crishim serves until SIGTERM or SIGINT. Its settings come from
the flags below and from a TOML config file (--config, default
/etc/crishim/config.toml when it exists) whose keys are the flag names; a flag on
the command line overrides the file's key. SIGHUP, or a change of the file, reloads
the settings that can change live (see docs/flags.md).`

const rootExample = `  # serve in front of containerd, as the systemd unit does
  crishim --listen /run/crishim/crishim.sock \
          --runtime-endpoint unix:///run/containerd/containerd.sock

  # write a config file with every key, commented out at its default
  crishim config default > /etc/crishim/config.toml

  # check a config file and show the settings crishim would run with
  crishim --config /etc/crishim/config.toml config dump

  # reload the config file and the debug image allowlist
  systemctl reload crishim     # or: kill -HUP $(pidof crishim)`

// execute runs crishim's command line and returns the exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(newRootOptions())
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errLogged):
		return 1
	}
	fmt.Fprintf(stderr, "crishim: %v\n", err)
	var u usageError
	if errors.As(err, &u) {
		fmt.Fprintln(stderr, "Run 'crishim --help' for usage.")
		return 2
	}
	return 1
}

func newRootOptions() *rootOptions {
	o := &rootOptions{settings: &config{}}
	o.sections = o.settings.sections()
	o.flags = merged(o.sections)
	return o
}

func newRootCommand(opts *rootOptions) *cobra.Command {
	root := &cobra.Command{
		Use:           "crishim [flags]",
		Short:         "CRI interposer between the kubelet and the container runtime",
		Long:          rootLong,
		Example:       rootExample,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.showVersion {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "crishim", version)
				return err
			}
			return serve(opts)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{removedFlag(err)} })
	root.Flags().SortFlags = false
	root.PersistentFlags().SortFlags = false
	// Persistent, so that `crishim --listen X config dump` shows X.
	root.PersistentFlags().AddFlagSet(opts.flags)
	file := section(opts.sections, sectionConfigFile)
	file.StringVar(&opts.configPath, "config", defaultConfigPath, "TOML file of settings, keyed by flag name; used if it exists when not given; \"\" for none")
	root.PersistentFlags().AddFlagSet(file)
	global := section(opts.sections, sectionGlobal)
	global.BoolVar(&opts.showVersion, "version", false, "print the version and exit")
	// Declared here, not by cobra at Execute, so that --help lists it in
	// its section.
	global.BoolP("help", "h", false, "help for crishim")
	root.Flags().AddFlagSet(global)
	setSectionedHelp(root, opts.sections)
	root.AddCommand(newVersionCommand(), newConfigCommand(opts))
	return root
}

// noArgs refuses positional arguments, which crishim never takes: a typo of
// a command must not start the daemon.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return nil
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print crishim's version, commit and Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "crishim %s (commit %s, %s %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// setSectionedHelp makes root's --help and usage list its flags by
// feature, as Kubernetes components do (cliflag.PrintSections), in place
// of cobra's one long list; the commands and examples stay. Commands below
// root keep cobra's own help: their flags are few.
func setSectionedHelp(root *cobra.Command, sections *cliflag.NamedFlagSets) {
	help, usage := root.HelpFunc(), root.UsageFunc()
	root.SetUsageFunc(func(cmd *cobra.Command) error {
		if cmd != root {
			return usage(cmd)
		}
		return writeUsage(cmd.OutOrStderr(), cmd, sections)
	})
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		if cmd != root {
			help(cmd, args)
			return
		}
		out := cmd.OutOrStdout()
		if _, err := fmt.Fprintf(out, "%s\n\n", cmd.Long); err != nil {
			return
		}
		if err := writeUsage(out, cmd, sections); err != nil {
			cmd.PrintErrln(err)
		}
	})
}

// writeUsage writes what cobra's usage template does for root, with the
// flags in sections.
func writeUsage(w io.Writer, root *cobra.Command, sections *cliflag.NamedFlagSets) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s\n  %s [command]\n", root.UseLine(), root.CommandPath())
	fmt.Fprintf(&b, "\nExamples:\n%s\n", root.Example)
	b.WriteString("\nAvailable Commands:\n")
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() || c.Name() == "help" {
			fmt.Fprintf(&b, "  %-*s %s\n", root.NamePadding(), c.Name(), c.Short)
		}
	}
	// 0 columns: no wrapping, as cobra's own flag list.
	cliflag.PrintSections(&b, *sections, 0)
	fmt.Fprintf(&b, "\nUse \"%s [command] --help\" for more information about a command.\n", root.CommandPath())
	_, err := io.WriteString(w, b.String())
	return err
}
