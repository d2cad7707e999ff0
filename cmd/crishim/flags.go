package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/crishim/crishim/proxy"
)

var errHelp = errors.New("help requested")

// config is the daemon's command line, with the defaults of DESIGN.md.
type config struct {
	listen          string
	runtimeEndpoint string
	imageEndpoint   string
	metricsAddress  string
	maxMessageSize  int
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logFormat       string
	showVersion     bool
	relay           proxy.RelayMode
	target          targetConfig
	stopSignal      stopSignalConfig
	streaming       streamingConfig
	notifications   notificationsConfig
	debugImages     debugImagesConfig
	audit           auditConfig
	record          recordConfig
	tracing         tracingConfig
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("crishim", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "/run/crishim/crishim.sock", "path of the CRI socket to serve (mode 0660)")
	fs.StringVar(&c.runtimeEndpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "CRI runtime service endpoint (unix:///path)")
	fs.StringVar(&c.imageEndpoint, "image-endpoint", "", "CRI image service endpoint (unix:///path); empty means --runtime-endpoint")
	fs.StringVar(&c.metricsAddress, "metrics-address", "127.0.0.1:9847", "HOST:PORT for /metrics, /healthz and /readyz; empty disables")
	fs.IntVar(&c.maxMessageSize, "max-message-size", proxy.DefaultMaxMessageSize, "largest gRPC message in bytes, both ways (the kubelet's limit is 16 MiB)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	relay := fs.String("relay", string(proxy.RelayH2), "how pass-through calls travel: h2 (HTTP/2 frame relay) or grpc (grpc-go relay, the fallback)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	c.target.register(fs)
	c.stopSignal.register(fs)
	c.streaming.register(fs)
	c.notifications.register(fs)
	c.debugImages.register(fs)
	c.audit.register(fs)
	c.record.register(fs)
	c.tracing.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, errHelp
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.showVersion {
		return c, nil
	}
	if err := c.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return c, fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
	}
	c.relay = proxy.RelayMode(*relay)
	if c.relay != proxy.RelayH2 && c.relay != proxy.RelayGRPC {
		return c, fmt.Errorf("--relay %q: want h2 or grpc", *relay)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if _, err := proxy.ParseEndpoint(c.runtimeEndpoint); err != nil {
		return c, fmt.Errorf("--runtime-endpoint: %w", err)
	}
	if c.imageEndpoint == "" {
		c.imageEndpoint = c.runtimeEndpoint
	}
	if _, err := proxy.ParseEndpoint(c.imageEndpoint); err != nil {
		return c, fmt.Errorf("--image-endpoint: %w", err)
	}
	if c.maxMessageSize <= 0 {
		return c, fmt.Errorf("--max-message-size %d: must be positive", c.maxMessageSize)
	}
	if c.shutdownTimeout < 0 {
		return c, fmt.Errorf("--shutdown-timeout %s: must not be negative", c.shutdownTimeout)
	}
	if err := c.target.finish(fs, c.runtimeEndpoint); err != nil {
		return c, err
	}
	if err := c.stopSignal.finish(c.target.containerdAddress); err != nil {
		return c, err
	}
	if err := c.streaming.finish(); err != nil {
		return c, err
	}
	if err := c.notifications.finish(); err != nil {
		return c, err
	}
	if err := c.debugImages.finish(); err != nil {
		return c, err
	}
	if err := c.audit.finish(); err != nil {
		return c, err
	}
	if err := c.record.finish(); err != nil {
		return c, err
	}
	if err := c.tracing.finish(); err != nil {
		return c, err
	}
	return c, nil
}

func newLogger(w io.Writer, c config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
