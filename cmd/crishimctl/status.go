package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/crishim/crishim/shim/crishimv1"
)

func newStatusCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show crishim's version, the runtime behind it and the modes in force",
		Example: `  crishimctl status
  crishimctl status -o json | jq -r .runtimeVersion`,
		Args: noArgs,
	}
	o := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return g.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
			resp, err := crishimv1.NewCrishimClient(conn).Status(ctx, &crishimv1.StatusRequest{})
			if err != nil {
				return g.explain("status", err)
			}
			return printProto(cmd.OutOrStdout(), *o, resp, func(w io.Writer) error { return statusTable(w, resp) })
		})
	}
	return cmd
}

func statusTable(out io.Writer, resp *crishimv1.StatusResponse) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "crishim version:\t%s\n", resp.GetVersion())
	fmt.Fprintf(tw, "runtime endpoint:\t%s\n", resp.GetRuntimeEndpoint())
	fmt.Fprintf(tw, "image endpoint:\t%s\n", resp.GetImageEndpoint())
	if resp.GetRuntimeReady() {
		fmt.Fprintf(tw, "runtime:\t%s %s (CRI %s)\n", resp.GetRuntimeName(), resp.GetRuntimeVersion(), resp.GetRuntimeApiVersion())
	} else {
		fmt.Fprintf(tw, "runtime:\tNOT READY: %s\n", resp.GetRuntimeError())
	}
	if len(resp.GetModes()) == 0 {
		fmt.Fprintf(tw, "modes:\tnone (every call is passed through)\n")
	}
	for _, m := range resp.GetModes() {
		fmt.Fprintf(tw, "mode %s:\t%s (configured %s): %s\n", m.GetFeature(), m.GetEffective(), m.GetConfigured(), m.GetReason())
	}
	return tw.Flush()
}
