package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/crishim/crishim/shim/crishimv1"
)

// errNotifyFailed: the call worked, but the notifier did not succeed
// everywhere; the answer is printed and crishimctl exits 1.
var errNotifyFailed = errors.New("notifier did not succeed in every container")

// selectorFlag collects --selector k=v (repeated or comma-separated).
type selectorFlag map[string]string

func (s selectorFlag) String() string { return fmt.Sprint(map[string]string(s)) }

func (s selectorFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value", kv)
		}
		s[k] = val
	}
	return nil
}

// notify runs a named notifier in the selected pods.
func notify(ctx context.Context, conn *grpc.ClientConn, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("notify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pod := fs.String("pod", "", "pod sandbox ID (or unique prefix)")
	sel := selectorFlag{}
	fs.Var(sel, "selector", "label selector key=value (repeat or comma-separate; all must match)")
	format := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: notify: %v", errUsage, err)
	}
	switch {
	case fs.NArg() != 1:
		return fmt.Errorf("%w: notify: want one notifier NAME after the flags", errUsage)
	case (*pod == "") == (len(sel) == 0):
		return fmt.Errorf("%w: notify: give exactly one of --pod and --selector", errUsage)
	case *format != "table" && *format != "json":
		return fmt.Errorf("%w: notify: -o %q, want table or json", errUsage, *format)
	}
	resp, err := crishimv1.NewCrishimClient(conn).Notify(ctx, &crishimv1.NotifyRequest{
		Notifier: fs.Arg(0), PodSandboxId: *pod, LabelSelector: sel,
	})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if *format == "json" {
		b, err := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
		if err != nil {
			return fmt.Errorf("notify: encode: %w", err)
		}
		if _, err := fmt.Fprintln(out, string(b)); err != nil {
			return err
		}
	} else if err := notifyTable(out, resp); err != nil {
		return err
	}
	for _, p := range resp.GetPods() {
		for _, c := range p.GetContainers() {
			if !c.GetSucceeded() {
				return errNotifyFailed
			}
		}
	}
	return nil
}

func notifyTable(out io.Writer, resp *crishimv1.NotifyResponse) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tSTARTED\tRESULT\tMESSAGE")
	for _, p := range resp.GetPods() {
		pod := p.GetPodName()
		if ns := p.GetPodNamespace(); ns != "" {
			pod = ns + "/" + pod
		}
		for _, c := range p.GetContainers() {
			started := "-"
			if c.GetStartedAt() != nil {
				started = c.GetStartedAt().AsTime().Local().Format(time.TimeOnly + ".000")
			}
			result, msg := "Succeeded", ""
			if e := c.GetError(); !c.GetSucceeded() {
				result, msg = e.GetType()+"/"+e.GetReason(), e.GetMessage()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", pod, c.GetContainerName(), started, result, msg)
		}
	}
	return tw.Flush()
}
