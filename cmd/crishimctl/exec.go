package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// newExecCommand is `crishimctl exec [-i] [-t] CONTAINER -- CMD...`: a CRI
// Exec through crishim, streamed through crishim's streaming server.
// --timeout bounds the Exec call, never the session.
func newExecCommand(g *globals) *cobra.Command {
	var interactive, tty bool
	cmd := &cobra.Command{
		Use:   "exec [-i] [-t] CONTAINER -- CMD [ARGS...]",
		Short: "Run CMD in CONTAINER, streamed through crishim",
		Long: `Run CMD in CONTAINER (an ID) through crishim's streaming server, as the kubelet's
exec does (docs/streaming.md). Exits with CMD's exit code, as kubectl exec.`,
		Example: `  crishimctl exec 3f2a -- cat /etc/os-release
  crishimctl exec -it 3f2a -- sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || cmd.ArgsLenAtDash() == 0 {
				return usageError{errors.New("exec: want CONTAINER -- CMD")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&interactive, "stdin", "i", false, "pass stdin to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command in a TTY")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		container, command := args[0], args[1:]
		if tty && !isTerminal(os.Stdin) {
			// As kubectl: a TTY fed from a pipe would echo and mangle it.
			fmt.Fprintln(cmd.ErrOrStderr(), "crishimctl: stdin is not a terminal; running without a TTY")
			tty = false
		}
		req := &runtimeapi.ExecRequest{
			ContainerId: container,
			Cmd:         command,
			Tty:         tty,
			Stdin:       interactive,
			Stdout:      true,
			Stderr:      !tty,
		}
		conn, err := g.dial()
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
		resp, err := runtimeapi.NewRuntimeServiceClient(conn).Exec(ctx, req)
		cancel()
		if err != nil {
			return g.explain("exec", err)
		}
		opts := streamOptions{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), TTY: tty}
		if interactive {
			opts.Stdin = os.Stdin
		}
		return streamURL(cmd.Context(), resp.GetUrl(), opts)
	}
	return cmd
}
