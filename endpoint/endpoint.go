// Package endpoint reads a CRI endpoint as the kubelet and crictl write it.
package endpoint

import (
	"fmt"
	"net/url"
	"path/filepath"
)

// Parse validates a unix socket endpoint given as the kubelet and
// crictl take it, unix:///path or the absolute path alone, and returns the
// socket path. Anything else is refused at startup rather than failing on
// first use.
func Parse(endpoint string) (string, error) {
	if endpoint == "" {
		return "", fmt.Errorf("endpoint is empty, want unix:///path/to/socket or /path/to/socket")
	}
	if filepath.IsAbs(endpoint) {
		return filepath.Clean(endpoint), nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch {
	case u.Scheme == "":
		return "", fmt.Errorf("endpoint %q: a relative path, want an absolute one: unix:///path/to/socket or /path/to/socket", endpoint)
	case u.Scheme != "unix":
		return "", fmt.Errorf("endpoint %q: scheme %q is not supported, want unix:///path/to/socket", endpoint, u.Scheme)
	case u.Host != "":
		return "", fmt.Errorf("endpoint %q: unix endpoints take no host (%q), want unix:///path/to/socket", endpoint, u.Host)
	case u.Path == "" || !filepath.IsAbs(u.Path):
		return "", fmt.Errorf("endpoint %q: socket path must be absolute, want unix:///path/to/socket", endpoint)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("endpoint %q: unexpected query or fragment", endpoint)
	}
	return filepath.Clean(u.Path), nil
}
