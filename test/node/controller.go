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
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/crishim/crishim/test/harness"
)

// controllerManifest is the file of packaging/kubernetes that runs the Notification API's
// aggregator: its namespace, ServiceAccount, RBAC and Deployment.
const controllerManifest = "notification-controller.yaml"

// ControllerNamespace and ControllerDeployment name the aggregator's Deployment.
const (
	ControllerNamespace  = "crishim-system"
	ControllerDeployment = "crishim-notification-controller"
)

// installManifests applies what the repository ships for the cluster, as an operator would
// with kubectl: the CRDs and the RBAC and admission policy nodes need; with controller also
// the aggregator (crishim-notification-controller) as a real pod on the node: its image,
// built offline, imported into the node's runtime, and its manifest with the bed's changes
// (bedController).
func (n *Node) installManifests(ctx context.Context, controller bool) error {
	dir, err := manifestsDir()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	args := []string{"apply"}
	for _, f := range files {
		if filepath.Base(f) != controllerManifest {
			args = append(args, "-f", f)
		}
	}
	if _, err := n.Kubectl(ctx, nil, args...); err != nil {
		return fmt.Errorf("install %s: %w", dir, err)
	}
	if _, err := n.Kubectl(ctx, nil, "wait", "--for=condition=Established", "crd/notifications.crishim.io", "crd/nodenotifications.crishim.io", "crd/notificationinboxes.crishim.io", "--timeout=60s"); err != nil {
		return err
	}
	if !controller {
		return nil
	}
	return n.installController(ctx, filepath.Join(dir, controllerManifest))
}

// controllerImage builds the aggregator's image archive from this checkout.
func controllerImage(ctx context.Context) ([]byte, error) {
	dir, err := packagingDir()
	if err != nil {
		return nil, err
	}
	return harness.NotificationControllerArchive(ctx, filepath.Dir(dir))
}

// installController imports the aggregator's image into the node's runtime, applies its
// manifest with the bed's changes and waits until its pods run.
func (n *Node) installController(ctx context.Context, manifest string) error {
	if n.cd == nil || n.controllerImage == nil {
		return errors.New("install the notification controller: only on a node this process starts")
	}
	if err := n.cd.ImportArchive(ctx, n.controllerImage, harness.NotificationControllerImage); err != nil {
		return err
	}
	shipped, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	bed, err := bedController(shipped, n.s.APIServerPort)
	if err != nil {
		return fmt.Errorf("%s: %w", manifest, err)
	}
	if _, err := n.Kubectl(ctx, bed, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("install the notification controller: %w", err)
	}
	if _, err := n.Kubectl(ctx, nil, "-n", ControllerNamespace, "rollout", "status", "deployment/"+ControllerDeployment, "--timeout=120s"); err != nil {
		out, _ := n.Kubectl(ctx, nil, "-n", ControllerNamespace, "describe", "pods")
		return fmt.Errorf("the notification controller does not run: %w\n%s", err, tailBytes(out, 4096))
	}
	return nil
}

// bedController is the shipped notification-controller.yaml with what the test bed needs
// and a real cluster does not: the bed runs no kube-proxy, so the service IP that in-cluster
// configuration dials (KUBERNETES_SERVICE_HOST, set by the kubelet) leads nowhere. The pods
// run in the host's network instead (hostNetwork) and reach the apiserver on loopback, whose
// serving certificate names 127.0.0.1. Every other document passes unchanged.
func bedController(shipped []byte, apiserverPort int) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(shipped), 4096)
	var out bytes.Buffer
	deployments := 0
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		obj := any(u.Object)
		if u.GetKind() == "Deployment" && u.GetName() == ControllerDeployment {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				return nil, err
			}
			d.Spec.Template.Spec.HostNetwork = true
			for i := range d.Spec.Template.Spec.Containers {
				c := &d.Spec.Template.Spec.Containers[i]
				c.Env = append(c.Env,
					corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"},
					corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(apiserverPort)})
			}
			obj = &d
			deployments++
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	if deployments != 1 {
		return nil, fmt.Errorf("want one Deployment %s, found %d", ControllerDeployment, deployments)
	}
	return []byte(strings.TrimPrefix(out.String(), "---\n")), nil
}
