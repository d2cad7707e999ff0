package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/crishim/crishim/shim/crishimv1"
)

// newSignalCommand sends a signal to a container through crishim: a config
// reload (SIGHUP) for an image that has no kill binary.
func newSignalCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signal CONTAINER SIGNAL",
		Short: "Send SIGNAL to CONTAINER's main process, once",
		Long: `Send SIGNAL (SIGHUP, HUP or 1) to the main process of CONTAINER (an ID or a unique
prefix), once, through the containerd API or a pidfd: no kill binary needed in the
image (docs/signals.md).`,
		Example: `  crishimctl signal 3f2a SIGHUP
  crishimctl signal 3f2a HUP -o json`,
		Args: exactArgs(2, "CONTAINER SIGNAL"),
	}
	o := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return g.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
			resp, err := crishimv1.NewCrishimClient(conn).Signal(ctx, &crishimv1.SignalRequest{ContainerId: args[0], Signal: args[1]})
			if err != nil {
				return g.explain("signal", err)
			}
			return printProto(cmd.OutOrStdout(), *o, resp, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "sent %s (%d) to container %s via %s\n", resp.GetSignal(), resp.GetNumber(), resp.GetContainerId(), resp.GetVia())
				return err
			})
		})
	}
	return cmd
}
