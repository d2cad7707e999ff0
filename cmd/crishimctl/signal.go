package main

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc"

	"github.com/crishim/crishim/shim/crishimv1"
)

// signalCommand sends a signal to a container through crishim: a config
// reload (SIGHUP) for an image that has no kill binary.
func signalCommand(ctx context.Context, conn *grpc.ClientConn, args []string, out io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("%w: signal: want CONTAINER SIGNAL", errUsage)
	}
	resp, err := crishimv1.NewCrishimClient(conn).Signal(ctx, &crishimv1.SignalRequest{ContainerId: args[0], Signal: args[1]})
	if err != nil {
		return fmt.Errorf("signal: %w", err)
	}
	_, err = fmt.Fprintf(out, "sent %s (%d) to container %s via %s\n", resp.GetSignal(), resp.GetNumber(), resp.GetContainerId(), resp.GetVia())
	return err
}
