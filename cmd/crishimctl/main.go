// Command crishimctl is the operator CLI for a node's crishim: it talks to
// crishim's own API (crishim.v1) on crishim's socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/crishim/crishim/proxy"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

const usage = `usage: crishimctl [--endpoint URL] [--timeout D] COMMAND [ARGS]

commands:
  status [-o text|json]   crishim's version, the runtime behind it and the modes in force
  debug --target C [--image IMG] [--name NAME] -- CMD...
                          run CMD in a new container of C's pod that sees C's processes
                          (PID namespace TARGET); on a terminal attach to it (TTY),
                          otherwise print its output; --timeout bounds the calls
  exec [-i] [-t] CONTAINER -- CMD...
                          run CMD in CONTAINER, streamed through crishim (-i stdin, -t TTY);
                          exits with CMD's exit code
  signal CONTAINER SIGNAL  send SIGNAL (SIGHUP, HUP or 1) to CONTAINER's main process, once
  notify (--pod ID | --selector k=v) [-o table|json] NAME
                          run notifier NAME (pod annotation notifier.crishim.io/<container>.NAME)
                          in the selected pods; exits 1 unless it succeeded everywhere
  version                 crishimctl's version
`

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "crishimctl: %v\n", err)
		if errors.Is(err, errUsage) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		// exec: the remote command's exit code is crishimctl's, as with kubectl exec.
		var remote interface{ ExitStatus() int }
		if errors.As(err, &remote) {
			os.Exit(remote.ExitStatus())
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("bad usage")

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("crishimctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	endpoint := fs.String("endpoint", "unix:///run/crishim/crishim.sock", "crishim's socket")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of each call")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "version" {
		fmt.Fprintln(out, "crishimctl", version)
		return nil
	}
	path, err := proxy.ParseEndpoint(*endpoint)
	if err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *endpoint, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch cmd {
	case "status":
		return status(ctx, conn, rest, out)
	case "debug":
		return debug(ctx, conn, rest, out)
	case "signal":
		return signalCommand(ctx, conn, rest, out)
	case "notify":
		return notify(ctx, conn, rest, out)
	case "exec":
		// The session outlives --timeout, which bounds only the Exec call.
		return execCommand(context.WithoutCancel(ctx), conn, rest, *timeout)
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}
