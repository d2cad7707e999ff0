package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// execCommand is `crishimctl exec [-i] [-t] CONTAINER -- CMD...`: a CRI Exec
// through crishim, streamed through crishim's streaming server. timeout
// bounds the Exec call, never the session.
func execCommand(ctx context.Context, conn *grpc.ClientConn, args []string, timeout time.Duration) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	interactive := fs.Bool("i", false, "pass stdin to the command")
	tty := fs.Bool("t", false, "run the command in a TTY")
	if err := fs.Parse(splitShortFlags(args)); err != nil {
		return fmt.Errorf("%w: exec: %v", errUsage, err)
	}
	rest := fs.Args()
	if len(rest) < 2 || (rest[1] == "--" && len(rest) < 3) {
		return fmt.Errorf("%w: exec: want CONTAINER -- CMD", errUsage)
	}
	container, cmd := rest[0], rest[1:]
	if cmd[0] == "--" {
		cmd = cmd[1:]
	}
	if *tty && !isTerminal(os.Stdin) {
		// As kubectl: a TTY fed from a pipe would echo and mangle it.
		fmt.Fprintln(os.Stderr, "crishimctl: stdin is not a terminal; running without a TTY")
		*tty = false
	}
	req := &runtimeapi.ExecRequest{
		ContainerId: container,
		Cmd:         cmd,
		Tty:         *tty,
		Stdin:       *interactive,
		Stdout:      true,
		Stderr:      !*tty,
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Exec(cctx, req)
	cancel()
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	opts := streamOptions{Stdout: os.Stdout, Stderr: os.Stderr, TTY: *tty}
	if *interactive {
		opts.Stdin = os.Stdin
	}
	return streamURL(ctx, resp.GetUrl(), opts)
}

// splitShortFlags turns -it into -i -t, as kubectl users type it.
func splitShortFlags(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" || len(a) == 0 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		if a == "-it" || a == "-ti" {
			out = append(out, "-i", "-t")
			continue
		}
		out = append(out, a)
	}
	return out
}
