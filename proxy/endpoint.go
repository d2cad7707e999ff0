package proxy

import (
	"fmt"
	"net/url"
	"path/filepath"
)

// ParseEndpoint validates an endpoint given the way the kubelet's
// --container-runtime-endpoint takes it (unix:///path) and returns the socket
// path. Anything else is refused at startup rather than failing on first use.
func ParseEndpoint(endpoint string) (string, error) {
	if endpoint == "" {
		return "", fmt.Errorf("endpoint is empty, want unix:///path/to/socket")
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch {
	case u.Scheme == "":
		return "", fmt.Errorf("endpoint %q has no scheme, want unix://%s", endpoint, endpoint)
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
