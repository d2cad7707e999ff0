package shim

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/metrics"
)

// debugImages applies the node's debug image allowlist to every container
// created with PID namespace TARGET: kubectl debug --target and crishimctl
// debug both create one.
type debugImages struct {
	policy  *allowlist.Policy // nil or not enforced: every image allowed
	images  runtimeapi.ImageServiceClient
	metrics *metrics.DebugImages
	log     *slog.Logger
}

// check returns nil when the image may run, PermissionDenied naming it and
// the flag when not. What is judged is the image the runtime will run, never
// the name as written: the runtime's ImageStatus resolves the name exactly
// as its CreateContainer does (containerd answers both with one function,
// LocalResolve), and the resolved image's repo tags and repo digests must
// match a pattern. The name alone would lie twice: a tag beside a digest
// (repo:tag@sha256:...) passes a tag pattern while the runtime runs the
// digest, and a short image ID (d096327f76b3) parses as a Docker Hub
// repository while the runtime runs whichever image the ID prefixes. The
// kubelet sends the image ID it resolved (and the pod spec's name as
// user_specified_image, which is not trusted: any CRI client could write
// anything there).
func (d *debugImages) check(ctx context.Context, img *runtimeapi.ImageSpec) error {
	if !d.policy.Enforced() {
		return nil
	}
	name := img.GetImage()
	if name == "" {
		d.metrics.Check("refused")
		return status.Errorf(codes.InvalidArgument, "config.image.image: empty; a debug container must name its image")
	}
	resp, err := d.images.ImageStatus(toRuntime(ctx), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
	if err != nil {
		d.metrics.Check("error")
		return status.Errorf(status.Code(err), "config.image.image %q: asking the runtime which image it is, for the debug image allowlist: %v",
			name, status.Convert(err).Message())
	}
	resolved := append(append([]string{}, resp.GetImage().GetRepoTags()...), resp.GetImage().GetRepoDigests()...)
	if p, ok := d.policy.Match(resolved...); ok {
		d.allowed(name, strings.Join(resolved, " "), p)
		return nil
	}
	d.metrics.Check("refused")
	shown := name
	if u := img.GetUserSpecifiedImage(); u != "" && u != name {
		shown = u + " (" + name + ")"
	}
	known := "the runtime does not have it"
	if resp.GetImage() != nil {
		known = "known to the runtime as [" + strings.Join(resolved, " ") + "]"
	}
	d.log.Warn("debug container refused: image not in the allowlist", "image", name, "user_specified_image", img.GetUserSpecifiedImage(), "resolved", resolved)
	return status.Errorf(codes.PermissionDenied,
		"config.image.image: image %s is not allowed for debug containers on this node (%s); it matches no pattern of %s",
		shown, known, d.policy.Governs())
}

func (d *debugImages) allowed(image, as string, p allowlist.Pattern) {
	d.metrics.Check("allowed")
	d.log.Debug("debug image allowed", "image", image, "as", as, "pattern", p.String())
}
