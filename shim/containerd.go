package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"
)

// Containerd is crishim's client of the containerd API, for what CRI cannot
// express: a container's task PID and changing a created container's OCI
// spec before its task starts. A nil *Containerd means the containerd-native
// paths are disabled (--containerd-address ""); callers fall back to CRI or
// fail with a reason.
type Containerd struct {
	client    containerdClient
	address   string
	namespace string
}

// containerdClient is where crishim meets containerd's client: the task
// service, the container store and the daemon's version, nothing else.
// *client.Client is one; the unit tests' fake containerd
// (containerd_fake_test.go) is the other, so the stop-signal and TARGET
// paths run without root.
type containerdClient interface {
	TaskService() tasks.TasksClient
	ContainerService() containers.Store
	Version(ctx context.Context) (client.Version, error)
	Close() error
}

// DialContainerd makes a containerd client for address (a socket path) and
// namespace ("k8s.io" for CRI objects). It does not wait for containerd: a
// containerd that is down is found out per call. An empty address returns
// nil, nil: the paths that need containerd are disabled.
func DialContainerd(address, namespace string) (*Containerd, error) {
	if address == "" {
		return nil, nil
	}
	cl, err := client.New(address, client.WithDefaultNamespace(namespace))
	if err != nil {
		return nil, fmt.Errorf("containerd client for %s: %w", address, err)
	}
	return &Containerd{client: cl, address: address, namespace: namespace}, nil
}

// Close closes the client; nil is fine.
func (c *Containerd) Close() error {
	if c == nil {
		return nil
	}
	if err := c.client.Close(); err != nil {
		return fmt.Errorf("close containerd client: %w", err)
	}
	return nil
}

// reachable reports whether the containerd API answers at the address: the
// CRI socket of another runtime (CRI-O) answers CRI but not this.
func (c *Containerd) reachable(ctx context.Context) error {
	if _, err := c.client.Version(ctx); err != nil {
		return fmt.Errorf("containerd API at %s: %w", c.address, errgrpc.ToNative(err))
	}
	return nil
}

// taskPID is the host PID of the init process of the container's task.
func (c *Containerd) taskPID(ctx context.Context, containerID string) (int, error) {
	resp, err := c.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: containerID})
	if err != nil {
		return 0, fmt.Errorf("containerd task of %s: %w", containerID, errgrpc.ToNative(err))
	}
	pid := int(resp.GetProcess().GetPid())
	if pid <= 0 {
		return 0, fmt.Errorf("containerd task of %s has no process: %w", containerID, errdefs.ErrNotFound)
	}
	return pid, nil
}

// errNoPIDNamespace: a spec without a pid namespace entry would run the
// container in the host's PID namespace; crishim never turns that into a join.
var errNoPIDNamespace = errors.New("the OCI spec has no pid entry in linux.namespaces")

// joinPIDNamespace rewrites the pid entry of a created container's OCI spec
// so that its task, when started, joins the namespace at path instead of
// getting a new one. Only linux.namespaces is decoded; the rest of the spec
// is written back as containerd stored it, so fields newer than crishim's
// runtime-spec survive.
func (c *Containerd) joinPIDNamespace(ctx context.Context, containerID, path string) error {
	store := c.client.ContainerService()
	rec, err := store.Get(ctx, containerID)
	if err != nil {
		return fmt.Errorf("containerd container %s: %w", containerID, errgrpc.ToNative(err))
	}
	if rec.Spec == nil {
		return fmt.Errorf("containerd container %s has no spec", containerID)
	}
	spec, err := setPIDNamespacePath(rec.Spec.GetValue(), path)
	if err != nil {
		return fmt.Errorf("containerd container %s: %w", containerID, err)
	}
	rec.Spec = &anypb.Any{TypeUrl: rec.Spec.GetTypeUrl(), Value: spec}
	if _, err := store.Update(ctx, rec, "spec"); err != nil {
		return fmt.Errorf("update spec of containerd container %s: %w", containerID, errgrpc.ToNative(err))
	}
	return nil
}

// setPIDNamespacePath returns the JSON OCI spec with the pid namespace's
// path set.
func setPIDNamespacePath(spec []byte, path string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(spec, &top); err != nil {
		return nil, fmt.Errorf("decode OCI spec: %w", err)
	}
	var linux map[string]json.RawMessage
	if raw, ok := top["linux"]; ok {
		if err := json.Unmarshal(raw, &linux); err != nil {
			return nil, fmt.Errorf("decode OCI spec linux: %w", err)
		}
	}
	var nss []specs.LinuxNamespace
	if raw, ok := linux["namespaces"]; ok {
		if err := json.Unmarshal(raw, &nss); err != nil {
			return nil, fmt.Errorf("decode OCI spec linux.namespaces: %w", err)
		}
	}
	found := false
	for i := range nss {
		if nss[i].Type == specs.PIDNamespace {
			nss[i].Path = path
			found = true
		}
	}
	if !found {
		return nil, errNoPIDNamespace
	}
	var err error
	if linux["namespaces"], err = json.Marshal(nss); err != nil {
		return nil, fmt.Errorf("encode OCI spec linux.namespaces: %w", err)
	}
	if top["linux"], err = json.Marshal(linux); err != nil {
		return nil, fmt.Errorf("encode OCI spec linux: %w", err)
	}
	out, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("encode OCI spec: %w", err)
	}
	return out, nil
}
