package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry serves RegistryImages over the OCI distribution API (go-containerregistry's
// in-memory registry), in plain HTTP on a loopback port. Runtimes pull from it as from the
// internet once Options.Mirrors sends their registries' hosts to it: tests that exercise
// PullImage itself (critest's) need a registry, since containerd and CRI-O resolve every pull
// remotely even when the image is present.
type Registry struct {
	Addr  string   // host:port it listens on
	Hosts []string // the registry hosts its images' references name
	srv   *http.Server
	done  chan error
}

// ServeRegistry builds images (on the host's busybox), pushes them to a registry it serves
// until Close under their references' repository paths and tags, and returns it. The host of
// a reference is dropped (mirrored pulls carry it only as ?ns=, which the registry ignores),
// so one path names the same image whichever registry a reference names.
func ServeRegistry(ctx context.Context, images []RegistryImage) (*Registry, error) {
	layer, err := busyboxLayer(ctx)
	if err != nil {
		return nil, err
	}
	base := static.NewLayer(layer, types.OCIUncompressedLayer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry listen: %w", err)
	}
	r := &Registry{Addr: ln.Addr().String(), done: make(chan error, 1)}
	r.srv = &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	go func() { r.done <- r.srv.Serve(ln) }()
	if err := r.push(ctx, images, base); err != nil {
		return nil, errors.Join(err, r.Close())
	}
	return r, nil
}

// push builds each image and writes it to the registry with go-containerregistry's client.
func (r *Registry) push(ctx context.Context, images []RegistryImage, base v1.Layer) error {
	seenHost := map[string]bool{}
	for _, img := range images {
		ref, host, err := registryTag(img.Ref)
		if err != nil {
			return err
		}
		dst, err := name.NewTag(r.Addr+"/"+ref.RepositoryStr()+":"+ref.TagStr(), name.Insecure)
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Ref, err)
		}
		image, err := img.build(base)
		if err != nil {
			return err
		}
		if err := remote.Write(dst, image, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push %s: %w", img.Ref, err)
		}
		if !seenHost[host] {
			seenHost[host] = true
			r.Hosts = append(r.Hosts, host)
		}
	}
	return nil
}

// registryTag parses a reference that names its registry host and, optionally, a tag
// ("latest" when none); it returns the host as the reference spells it, the one runtimes
// look up mirrors by. References by digest are refused: a digest names bytes this registry
// cannot reproduce.
func registryTag(ref string) (name.Tag, string, error) {
	host, _, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") {
		return name.Tag{}, "", fmt.Errorf("image reference %q does not name a registry host", ref)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return tag, host, nil
}

// Mirrors maps every host in Hosts to this registry, for Options.Mirrors.
func (r *Registry) Mirrors() map[string]string {
	m := make(map[string]string, len(r.Hosts))
	for _, h := range r.Hosts {
		m[h] = "http://" + r.Addr
	}
	return m
}

// Close stops serving; pulls in flight fail.
func (r *Registry) Close() error {
	err := r.srv.Close()
	if serveErr := <-r.done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
