// Command crishimctl is the operator CLI for a node's crishim: it talks to
// crishim's own API (crishim.v1) on crishim's socket.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/crishim/crishim/cmd/internal/flagfile"
	"github.com/crishim/crishim/endpoint"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

const defaultEndpoint = "unix:///run/crishim/crishim.sock"

func main() {
	os.Exit(execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a bad command line: exit 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// execute runs a command line and returns crishimctl's exit code: 0; 2 for
// a bad command line; the remote command's for exec and debug, as kubectl
// exec; 1 for anything else, a notifier that did not succeed everywhere
// included.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(ctx)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "crishimctl: %v\n", err)
	var u usageError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return 2
	}
	var remote interface{ ExitStatus() int }
	if errors.As(err, &remote) {
		return remote.ExitStatus()
	}
	return 1
}

// globals are the flags of every command that talks to crishim.
type globals struct {
	endpoint    string
	endpointSet bool // --endpoint was given
	config      string
	configSet   bool // --config was given
	timeout     time.Duration
}

// defaultConfig is crishim's own default config file, whose listen key names
// the socket crishim serves when neither --endpoint nor $CRISHIM_ENDPOINT do.
var defaultConfig = "/etc/crishim/config.toml"

// endpointEnv names crishim's socket when --endpoint is not given, as
// CONTAINER_RUNTIME_ENDPOINT does for crictl.
const endpointEnv = "CRISHIM_ENDPOINT"

const rootLong = `crishimctl talks to a node's crishim on its socket: crishim's status, signals and
notifiers for containers, debug containers that share a container's PID namespace,
and exec streamed through crishim. Commands with output take -o table|json|yaml;
the JSON field names are stable (docs/crishimctl.md).`

const rootExample = `  crishimctl status
  crishimctl version -o json
  crishimctl signal 3f2a SIGHUP
  crishimctl notify --pod 9c1e reload -o json
  crishimctl debug --target 3f2a -- ps aux
  crishimctl exec -it 3f2a -- sh
  source <(crishimctl completion bash)`

func newRootCommand(ctx context.Context) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "crishimctl",
		Short:         "Operator CLI for crishim, the CRI interposer",
		Long:          rootLong,
		Example:       rootExample,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			_ = cmd.Help()
			return usageError{errors.New("no command")}
		},
	}
	root.SetContext(ctx)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if c.Name() == "exec" || c.Name() == "debug" {
			err = fmt.Errorf("%w (the command to run goes after --: %s ... -- CMD ARGS)", err, c.CommandPath())
		}
		return usageError{err}
	})
	root.PersistentFlags().StringVar(&g.endpoint, "endpoint", defaultEndpoint, "crishim's socket: unix:///path or /path (default: $"+endpointEnv+" if set, else the listen key of crishim's --config file)")
	root.PersistentFlags().StringVar(&g.config, "config", defaultConfig, "crishim's config file, whose listen key names the socket when neither --endpoint nor $"+endpointEnv+" do (used if it exists when not given)")
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		g.endpointSet = cmd.Flags().Changed("endpoint")
		g.configSet = cmd.Flags().Changed("config")
	}
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 10*time.Second, "deadline of each call to crishim (not of an exec or debug session)")
	root.AddCommand(
		newStatusCommand(g),
		newVersionCommand(g),
		newSignalCommand(g),
		newNotifyCommand(g),
		newDebugCommand(g),
		newExecCommand(g),
	)
	return root
}

// noArgs refuses positional arguments, naming an unknown command as such.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return nil
}

// exactArgs wants n arguments, named in usage.
func exactArgs(n int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s: want %s, got %d arguments", cmd.Name(), usage, len(args))}
		}
		return nil
	}
}

// dial connects to crishim; the connection is made lazily, by the first call.
func (g *globals) dial() (*grpc.ClientConn, error) {
	from, err := g.resolveEndpoint()
	if err != nil {
		return nil, err
	}
	path, err := endpoint.Parse(g.endpoint)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", from, err)}
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", g.endpoint, err)
	}
	return conn, nil
}

// resolveEndpoint settles g.endpoint, as crictl settles its own: --endpoint,
// else $CRISHIM_ENDPOINT, else the listen key of crishim's config file (the
// socket crishim serves), else the default. It returns where it came from.
func (g *globals) resolveEndpoint() (string, error) {
	if g.endpointSet {
		return "--endpoint", nil
	}
	if e := os.Getenv(endpointEnv); e != "" {
		g.endpoint = e
		return endpointEnv, nil
	}
	if g.config == "" {
		return "--endpoint", nil
	}
	listen, err := configListen(g.config)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !g.configSet:
		return "--endpoint", nil // no config file: crishim serves its default too
	case err != nil:
		return "", usageError{fmt.Errorf("--config: %w", err)}
	case listen != "":
		g.endpoint = listen
		return g.config + ": listen", nil
	}
	return "--endpoint", nil
}

// configListen reads the listen key of crishim's config file ("" when the
// file leaves it at its default). The other keys are crishim's business.
func configListen(path string) (string, error) {
	data, err := flagfile.ReadFile(path)
	if err != nil {
		return "", err
	}
	var c struct {
		Listen string `toml:"listen"`
	}
	if err := toml.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return c.Listen, nil
}

// call runs f with a connection to crishim under --timeout.
func (g *globals) call(cmd *cobra.Command, f func(ctx context.Context, conn *grpc.ClientConn) error) error {
	conn, err := g.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	return f(ctx, conn)
}

// explain says what to do next about an error of a call to crishim.
func (g *globals) explain(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := st.Message()
	switch {
	case st.Code() == codes.Unavailable && strings.Contains(msg, "permission denied"):
		return fmt.Errorf("%s: no permission to use crishim's socket %s: run as root or as a member of the socket's group: %w", what, g.endpoint, err)
	case st.Code() == codes.Unavailable && strings.Contains(msg, "dial"):
		return fmt.Errorf("%s: cannot reach crishim at %s: is crishim running? (systemctl status crishim) or pass --endpoint: %w", what, g.endpoint, err)
	case st.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("%s: crishim did not answer within --timeout %s: raise --timeout, or look at crishim's log (journalctl -u crishim): %w", what, g.timeout, err)
	case st.Code() == codes.Unimplemented:
		return fmt.Errorf("%s: %s does not serve this call: is it crishim (not the runtime's socket), and as new as crishimctl? (crishimctl version): %w", what, g.endpoint, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
