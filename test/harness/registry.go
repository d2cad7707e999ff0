package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Registry serves RegistryImages read-only over the OCI distribution API, in plain HTTP on a
// loopback port. Runtimes pull from it as from the internet once Options.Mirrors sends their
// registries' hosts to it: tests that exercise PullImage itself (critest's) need a registry,
// since containerd and CRI-O resolve every pull remotely even when the image is present.
type Registry struct {
	Addr  string   // host:port it listens on
	Hosts []string // the registry hosts its images' references name
	srv   *http.Server
	done  chan error

	manifests map[string]blob // "repo:tag" -> manifest
	blobs     map[string]blob // digest -> manifests, configs and layers
}

// ServeRegistry builds images (on the host's busybox) and serves them until Close.
func ServeRegistry(ctx context.Context, images []RegistryImage) (*Registry, error) {
	manifests, blobs, hosts, err := buildRegistryContent(ctx, images)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry listen: %w", err)
	}
	r := &Registry{Addr: ln.Addr().String(), Hosts: hosts, done: make(chan error, 1), manifests: manifests, blobs: blobs}
	r.srv = &http.Server{Handler: r}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
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

// ServeHTTP answers GET and HEAD of /v2/, /v2/<repo>/manifests/<tag or digest> and
// /v2/<repo>/blobs/<digest>; the ?ns=<host> that mirrored pulls carry is ignored, so a path
// names the same image whichever registry a reference names.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		registryError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
		return
	}
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	p := strings.TrimPrefix(req.URL.Path, "/v2/")
	if p == "" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
		return
	}
	if repo, ref, ok := cutLast(p, "/manifests/"); ok {
		b, found := r.manifests[repo+":"+ref]
		if strings.HasPrefix(ref, "sha256:") {
			b, found = r.blobs[ref]
		}
		if !found {
			registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest unknown: "+repo+" "+ref)
			return
		}
		serveBlob(w, req, b, mediaTypeManifest)
		return
	}
	if _, digest, ok := cutLast(p, "/blobs/"); ok {
		b, found := r.blobs[digest]
		if !found {
			registryError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob unknown: "+digest)
			return
		}
		serveBlob(w, req, b, "application/octet-stream")
		return
	}
	registryError(w, http.StatusNotFound, "NAME_UNKNOWN", "no such endpoint: "+req.URL.Path)
}

// serveBlob answers with the content, its digest, and ranges when asked (pullers resume).
func serveBlob(w http.ResponseWriter, req *http.Request, b blob, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Docker-Content-Digest", b.digest)
	w.Header().Set("Etag", strconv.Quote(b.digest))
	http.ServeContent(w, req, "", imageEpoch, bytes.NewReader(b.data))
}

func registryError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q}]}`, code, msg)
}

// cutLast splits s around the last sep.
func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+len(sep):], true
}
