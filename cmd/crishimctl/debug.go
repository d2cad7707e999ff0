package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// debugPoll is how often debug looks whether its command has finished.
const debugPoll = 100 * time.Millisecond

// debugOptions are debug's flags.
type debugOptions struct {
	target, image, name string
}

func newDebugCommand(g *globals) *cobra.Command {
	var o debugOptions
	cmd := &cobra.Command{
		Use:   "debug --target CONTAINER [--image IMG] [--name NAME] -- CMD [ARGS...]",
		Short: "Run CMD in a new container of CONTAINER's pod that sees CONTAINER's processes",
		Long: `Run CMD in a new container of CONTAINER's pod that shares CONTAINER's PID
namespace (CRI NamespaceMode TARGET, as kubectl debug --target). On a terminal,
attach to it (TTY); otherwise print its output when it ends and exit with its exit
code. --timeout bounds the calls to crishim and, without a terminal, the wait
(docs/pid-target.md).`,
		Example: `  crishimctl debug --target 3f2a -- ps aux
  crishimctl debug --target 3f2a --image docker.io/library/busybox:1.36 -- sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("debug: no command (debug --target C -- CMD...)")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.target, "target", "", "container whose processes to see (ID or unique prefix)")
	cmd.Flags().StringVar(&o.image, "image", "", "image of the debug container (default: the target's image)")
	cmd.Flags().StringVar(&o.name, "name", "debugger", "name of the debug container; taken names get -2, -3, ...")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case o.target == "":
			return usageError{errors.New("debug: --target is required")}
		case o.name == "":
			return usageError{errors.New("debug: --name is empty")}
		}
		return g.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
			err := debug(ctx, conn, o, args, cmd.OutOrStdout())
			if _, ok := err.(debugExit); ok || err == nil {
				return err
			}
			return g.explain("debug", err)
		})
	}
	return cmd
}

// debugImage is the image of a debug container: the one asked for, else
// the target's own. user_specified_image carries the name a person gave, as
// the kubelet and crictl send it: CRI-O refuses creates without it when a
// signature policy is set, since the policy is matched on that name.
func debugImage(asked string, target *runtimeapi.Container) *runtimeapi.ImageSpec {
	if asked != "" {
		return &runtimeapi.ImageSpec{Image: asked, UserSpecifiedImage: asked}
	}
	img := target.GetImageRef()
	if img == "" {
		img = target.GetImage().GetImage()
	}
	named := target.GetImage().GetUserSpecifiedImage()
	if named == "" {
		named = target.GetImage().GetImage()
	}
	return &runtimeapi.ImageSpec{Image: img, UserSpecifiedImage: named}
}

// debug creates a container in the target's pod that shares the target's
// PID namespace (CRI NamespaceMode TARGET, the kubelet's ephemeral debug
// container), starts it and shows what its command prints.
func debug(ctx context.Context, conn *grpc.ClientConn, o debugOptions, command []string, out io.Writer) error {
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	target, err := findTarget(ctx, rs, o.target)
	if err != nil {
		return err
	}
	podID := target.GetPodSandboxId()
	pod, err := podSandboxConfig(ctx, rs, podID)
	if err != nil {
		return err
	}
	ctrName, err := freeName(ctx, rs, podID, o.name)
	if err != nil {
		return err
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: ctrName},
		Image:    debugImage(o.image, target),
		Command:  command,
		Labels:   map[string]string{"crishim.io/debug-target": target.GetId()},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{
				Network:  runtimeapi.NamespaceMode_POD,
				Ipc:      runtimeapi.NamespaceMode_POD,
				Pid:      runtimeapi.NamespaceMode_TARGET,
				TargetId: target.GetId(),
			},
		}},
	}
	if pod.GetLogDirectory() != "" {
		cfg.LogPath = ctrName + ".log"
	}
	// On a terminal the debug container gets a TTY and the terminal is
	// attached to it, as with kubectl debug -it; otherwise (scripts, pipes)
	// its output is printed once the command ends.
	attach := isTerminal(os.Stdin)
	if attach {
		cfg.Stdin, cfg.StdinOnce, cfg.Tty = true, true, true
	}
	created, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
	if err != nil {
		return fmt.Errorf("create debug container: %w", err)
	}
	id := created.GetContainerId()
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("start debug container %s (%s): %w", ctrName, id, err)
	}
	fmt.Fprintf(os.Stderr, "debug container %s (%s) in pod %s, sharing the PID namespace of %s\n", ctrName, abbrevID(id), abbrevID(podID), abbrevID(target.GetId()))
	if attach {
		return attachTerminal(ctx, rs, id)
	}
	st, err := waitExit(ctx, rs, id)
	if err != nil {
		return err
	}
	if err := printLog(st.GetLogPath(), out); err != nil {
		return err
	}
	if code := st.GetExitCode(); code != 0 {
		return debugExit(code)
	}
	return nil
}

// debugExit is a debug command's non-zero exit status; crishimctl exits
// with it, as kubectl does.
type debugExit int32

func (e debugExit) Error() string   { return fmt.Sprintf("debug command exited with code %d", int32(e)) }
func (e debugExit) ExitStatus() int { return int(e) }

func findTarget(ctx context.Context, rs runtimeapi.RuntimeServiceClient, id string) (*runtimeapi.Container, error) {
	resp, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil {
		return nil, fmt.Errorf("look up target %s: %w", id, err)
	}
	var found []*runtimeapi.Container
	for _, c := range resp.GetContainers() {
		if c.GetId() == id {
			return c, nil
		}
		if strings.HasPrefix(c.GetId(), id) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("target container %q: %d containers match", id, len(found))
	}
	return found[0], nil
}

// podSandboxConfig recovers the configuration the pod was run with, which
// CreateContainer wants back (log directory, cgroup parent). Runtimes keep
// it in the verbose status (containerd: info.config); failing that, the
// status itself gives the essentials.
func podSandboxConfig(ctx context.Context, rs runtimeapi.RuntimeServiceClient, podID string) (*runtimeapi.PodSandboxConfig, error) {
	resp, err := rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("pod sandbox %s: %w", podID, err)
	}
	var info struct {
		Config *runtimeapi.PodSandboxConfig `json:"config"`
	}
	if raw, ok := resp.GetInfo()["info"]; ok && json.Unmarshal([]byte(raw), &info) == nil && info.Config.GetMetadata() != nil {
		return info.Config, nil
	}
	st := resp.GetStatus()
	return &runtimeapi.PodSandboxConfig{Metadata: st.GetMetadata(), Labels: st.GetLabels(), Annotations: st.GetAnnotations()}, nil
}

// freeName returns base, or base-2, base-3, ... whichever no container of
// the pod has: a runtime refuses a second container of the same name and
// attempt in a pod.
func freeName(ctx context.Context, rs runtimeapi.RuntimeServiceClient, podID, base string) (string, error) {
	resp, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: podID}})
	if err != nil {
		return "", fmt.Errorf("list containers of pod %s: %w", podID, err)
	}
	taken := map[string]bool{}
	for _, c := range resp.GetContainers() {
		taken[c.GetMetadata().GetName()] = true
	}
	name := base
	for n := 2; taken[name]; n++ {
		name = fmt.Sprintf("%s-%d", base, n)
	}
	return name, nil
}

func waitExit(ctx context.Context, rs runtimeapi.RuntimeServiceClient, id string) (*runtimeapi.ContainerStatus, error) {
	tick := time.NewTicker(debugPoll)
	defer tick.Stop()
	for {
		resp, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return nil, fmt.Errorf("debug container %s: %w", id, err)
		}
		if st := resp.GetStatus(); st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("debug container %s still running (raise --timeout): %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// printLog copies a container's output from its CRI log file
// ("<time> <stream> <P|F> <text>" per line; P marks a line continued in the
// next record) to out.
func printLog(path string, out io.Writer) error {
	if path == "" {
		return errors.New("the debug container has no log file (its pod has no log directory)")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("debug container log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) < 3 {
			continue
		}
		text := ""
		if len(fields) == 4 {
			text = fields[3]
		}
		if fields[2] != "P" {
			text += "\n"
		}
		if _, err := io.WriteString(out, text); err != nil {
			return err
		}
	}
	return sc.Err()
}

func abbrevID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

// attachTerminal connects the terminal to the debug container's TTY through
// crishim's streaming server. --timeout bounds the Attach call, not the
// session, which lasts as long as the debug shell.
func attachTerminal(ctx context.Context, rs runtimeapi.RuntimeServiceClient, id string) error {
	resp, err := rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Tty: true, Stdout: true})
	if err != nil {
		return fmt.Errorf("attach to debug container %s: %w", abbrevID(id), err)
	}
	return streamURL(context.WithoutCancel(ctx), resp.GetUrl(), streamOptions{Stdin: os.Stdin, Stdout: os.Stdout, TTY: true})
}
