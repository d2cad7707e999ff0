package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

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

func (s selectorFlag) Type() string { return "key=value" }

// newNotifyCommand runs a named notifier in the selected pods.
func newNotifyCommand(g *globals) *cobra.Command {
	var pod string
	sel := selectorFlag{}
	cmd := &cobra.Command{
		Use:   "notify (--pod ID | --selector k=v) NAME",
		Short: "Run notifier NAME in the selected pods",
		Long: `Run notifier NAME (declared by the pod annotation notifier.crishim.io/<container>.NAME)
in the pod given by --pod, or in every ready pod whose labels match --selector, and
show how it went in each container. Exits 1 unless it succeeded everywhere
(docs/signals.md).`,
		Example: `  crishimctl notify --pod 9c1e reload
  crishimctl notify --selector app=web,tier=front quiesce -o json`,
		Args: exactArgs(1, "one notifier NAME"),
	}
	cmd.Flags().StringVar(&pod, "pod", "", "pod sandbox ID (or unique prefix)")
	cmd.Flags().Var(sel, "selector", "label selector key=value (repeat or comma-separate; all must match)")
	o := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if (pod == "") == (len(sel) == 0) {
			return usageError{fmt.Errorf("notify: give exactly one of --pod and --selector")}
		}
		return g.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
			resp, err := crishimv1.NewCrishimClient(conn).Notify(ctx, &crishimv1.NotifyRequest{
				Notifier: args[0], PodSandboxId: pod, LabelSelector: sel,
			})
			if err != nil {
				return g.explain("notify", err)
			}
			if err := printProto(cmd.OutOrStdout(), *o, resp, func(w io.Writer) error { return notifyTable(w, resp) }); err != nil {
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
		})
	}
	return cmd
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
