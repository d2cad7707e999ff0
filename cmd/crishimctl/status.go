package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/crishim/crishim/shim/crishimv1"
)

func status(ctx context.Context, conn *grpc.ClientConn, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("o", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: status: %v", errUsage, err)
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: status: -o %q, want text or json", errUsage, *format)
	}
	resp, err := crishimv1.NewCrishimClient(conn).Status(ctx, &crishimv1.StatusRequest{})
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if *format == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return fmt.Errorf("status: encode: %w", err)
		}
		_, err = fmt.Fprintln(out, string(b))
		return err
	}
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
