package streaming

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/crishim/crishim/audit"
)

// Config is the streaming server's settings, what an operator chooses
// (flags or the config file): plain values that can be printed, compared
// and validated alone. What the server works with, the runtime, metrics,
// audit log and tracer, is given apart as Deps. The defaults are
// DESIGN.md's.
type Config struct {
	// Address is HOST:PORT to listen on (--streaming-address); port 0
	// picks a free port.
	Address string
	// TokenTTL is how long an issued token stays good (--stream-token-ttl).
	TokenTTL time.Duration
	// MaxTokens bounds the tokens outstanding (--stream-max-tokens).
	MaxTokens int
	// TLSCertFile and TLSKeyFile switch the server to HTTPS
	// (--streaming-tls-cert, --streaming-tls-key).
	TLSCertFile, TLSKeyFile string
	// AllowInsecure permits plain HTTP on a non-loopback address
	// (--streaming-allow-insecure).
	AllowInsecure bool
	// IdleTimeout ends a WebSocket exec or attach session (served by
	// crishim) after this long without a message either way, a WebSocket
	// port-forward tunnel without a byte either way
	// (--stream-idle-timeout); 0 never does.
	IdleTimeout time.Duration
	// MaxWebSocketSessions bounds the WebSocket exec, attach and
	// port-forward (tunnel) sessions open at once
	// (--stream-max-websocket-sessions).
	MaxWebSocketSessions int
	// Record selects the exec and attach sessions recorded, and where
	// (--record-sessions, --record-dir, --record-max-bytes,
	// --record-max-total-bytes, --record-input).
	Record audit.RecordConfig
}

// DefaultConfig is loopback on a random port, tokens good for a minute, at
// most 1000 of them (the runtimes' own defaults, from k8s.io/cri-streaming);
// WebSocket sessions idle for 4 hours end (the kubelet's
// --streaming-connection-idle-timeout, containerd's stream_idle_timeout
// and kube-apiserver's WebSocket idle timeout), at most
// defaultMaxWebSocketSessions open at once.
func DefaultConfig() Config {
	return Config{Address: "127.0.0.1:0", TokenTTL: time.Minute, MaxTokens: 1000,
		IdleTimeout: 4 * time.Hour, MaxWebSocketSessions: defaultMaxWebSocketSessions}
}

// defaultMaxWebSocketSessions bounds what WebSocket sessions hold (see
// docs/SECURITY.md for the figure per session): interactive shells on one
// node, never thousands; SPDY sessions, the kubelet's, are not counted.
const defaultMaxWebSocketSessions = 100

// Validate checks what can be checked without binding. A host name other
// than localhost is judged by the address it binds to, in Listen.
func (c Config) Validate() error {
	if c.TokenTTL <= 0 {
		return fmt.Errorf("--stream-token-ttl %s: must be positive", c.TokenTTL)
	}
	if c.MaxTokens <= 0 {
		return fmt.Errorf("--stream-max-tokens %d: must be positive", c.MaxTokens)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("--stream-idle-timeout %s: must be 0 (none) or positive", c.IdleTimeout)
	}
	if c.MaxWebSocketSessions <= 0 {
		return fmt.Errorf("--stream-max-websocket-sessions %d: must be positive", c.MaxWebSocketSessions)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("--streaming-tls-cert and --streaming-tls-key go together")
	}
	host, port, err := net.SplitHostPort(c.Address)
	if err != nil {
		return fmt.Errorf("--streaming-address %q: %w", c.Address, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("--streaming-address %q: port %q is not a number from 0 to 65535", c.Address, port)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); host == "" || ip != nil {
		return c.checkExposure(ip)
	}
	return nil
}

// checkExposure refuses plain HTTP beyond loopback unless asked for: a
// stream token is a shell in a container for whoever reads it off the wire.
func (c Config) checkExposure(ip net.IP) error {
	if c.TLSCertFile != "" || c.AllowInsecure || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("--streaming-address %q is not loopback: give --streaming-tls-cert and --streaming-tls-key, or --streaming-allow-insecure to serve plain HTTP", c.Address)
}

// advertisedHost is the host:port put in stream URLs. Clients need an
// address they can dial: a wildcard bind is replaced by the address of the
// interface holding the default route, as the kubelet picks its node IP.
func advertisedHost(addr *net.TCPAddr) (string, error) {
	ip := addr.IP
	if ip.IsUnspecified() {
		chosen, err := utilnet.ResolveBindAddress(ip)
		if err != nil {
			return "", fmt.Errorf("streaming address %s is a wildcard and no routable address was found for URLs (bind a specific address): %w", addr, err)
		}
		ip = chosen
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port)), nil
}
