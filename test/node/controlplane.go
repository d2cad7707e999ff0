package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crishim/crishim/test/harness"
)

// StartControlPlane starts only etcd and kube-apiserver in node index's directory (no
// runtime, no kubelet, no controllers), with the bed's PKI, and applies the manifests in
// dirs: what test/scale measures, with nothing else on the apiserver. Stop it with Stop.
func StartControlPlane(ctx context.Context, opts Options, dirs ...string) (*Node, error) {
	log := logger(opts)
	var bins Binaries
	var err error
	if dir := os.Getenv("CRISHIM_CONTROLPLANE_BINS"); dir != "" {
		// etcd and kube-apiserver from dir: for a machine whose full set of Kubernetes
		// binaries is not built yet (these two are all this needs).
		bins = Binaries{Dir: dir, Version: "from " + dir}
	} else if bins, err = EnsureBinaries(ctx, log); err != nil {
		return nil, err
	}
	if err := Clean(opts.Index); err != nil {
		return nil, fmt.Errorf("sweep node %d: %w", opts.Index, err)
	}
	l := layout{Dir(opts.Index)}
	if err := os.MkdirAll(l.path("logs"), 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	n := &Node{l: l, opts: opts, log: log, bins: bins}
	n.s = state{
		Index:         opts.Index,
		Name:          "crishim-controlplane-" + strconv.Itoa(opts.Index),
		NodeIP:        nodeIP(opts.Index), // advertised only: nothing listens there
		EtcdAddr:      "127.0.0.1:" + strconv.Itoa(ports[0]),
		EtcdPeerAddr:  "127.0.0.1:" + strconv.Itoa(ports[1]),
		APIServerPort: ports[2],
		Kubeconfig:    l.path("admin.kubeconfig"),
		Version:       bins.Version,
		Bins:          bins.Dir,
	}
	if err := writeState(l, n.s); err != nil {
		return nil, err
	}
	if err := n.writePKI(); err != nil {
		return nil, err
	}
	if _, err := startDaemon(l, bins.Path("etcd"), etcdArgs(l, n.s)); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, n.s.EtcdAddr); err != nil {
		return nil, fmt.Errorf("etcd: %w\n%s", err, logTail(l, "etcd"))
	}
	apiserver, err := startDaemon(l, bins.Path("kube-apiserver"), append(apiserverArgs(l, n.s, n.pki), opts.APIServerArgs...))
	if err != nil {
		return nil, err
	}
	if err := n.fill(); err != nil {
		return nil, err
	}
	if err := n.waitAPIServer(ctx, apiserver); err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if err := n.applyDir(ctx, d); err != nil {
			return nil, fmt.Errorf("install %s: %w", d, err)
		}
	}
	return n, nil
}

// applyDir applies every YAML document of dir's *.yaml files, in file order, by server-side
// apply: kubectl apply -f dir without kubectl.
func (n *Node) applyDir(ctx context.Context, dir string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := n.applyObject(ctx, dyn, &u); err != nil {
				return fmt.Errorf("%s: %s %s: %w", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

// applyObject applies u, retrying while its kind is not served yet (a CRD just created).
func (n *Node) applyObject(ctx context.Context, dyn dynamic.Interface, u *unstructured.Unstructured) error {
	return harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(n.Clientset.Discovery()))
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		r := dyn.Resource(m.Resource)
		opts := metav1.ApplyOptions{FieldManager: "crishim-test-bed", Force: true}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			_, err = r.Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), u, opts)
		} else {
			_, err = r.Apply(ctx, u.GetName(), u, opts)
		}
		return err
	})
}

// PIDs are the live processes of the node's component name ("etcd", "kube-apiserver").
func (n *Node) PIDs(name string) []int { return daemonsOf(n.l, name) }

// ManifestsDir is the repository's packaging/kubernetes.
func ManifestsDir() (string, error) { return manifestsDir() }
