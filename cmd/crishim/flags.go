package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/crishim/crishim/endpoint"
	"github.com/crishim/crishim/proxy"
)

// config is the daemon's settings, the command line's flags and the
// config file's keys alike; docs/flags.md explains each and its default.
type config struct {
	listen          string
	runtimeEndpoint string
	imageEndpoint   string
	metricsAddress  string
	maxMessageSize  int
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logFormat       string
	target          targetConfig
	stopSignal      stopSignalConfig
	streaming       streamingConfig
	notifications   notificationsConfig
	debugImages     debugImagesConfig
	audit           auditConfig
	record          recordConfig
	tracing         tracingConfig
}

// flags registers every setting of c on a new flag set, section after
// section as --help shows them, in the order of the default config file.
// A flag's own check refuses a bad value wherever it comes from, so that
// the file's errors name its line.
func (c *config) flags() *pflag.FlagSet {
	return merged(c.sections())
}

// sections registers every setting of c, each feature's into its own
// section of --help (docs/flags.md has a table for each). The flags are
// the same in the sections as in the merged set of flags(): one
// registration, two views.
func (c *config) sections() *cliflag.NamedFlagSets {
	nfs := &cliflag.NamedFlagSets{}
	c.registerRuntime(section(nfs, sectionRuntime))
	c.target.register(section(nfs, sectionTarget))
	c.stopSignal.register(section(nfs, sectionStopSignal))
	c.streaming.register(section(nfs, sectionStreaming))
	c.notifications.register(section(nfs, sectionNotifications))
	c.debugImages.register(section(nfs, sectionDebugImages))
	c.audit.register(section(nfs, sectionAudit))
	c.record.register(section(nfs, sectionAudit))
	c.tracing.register(section(nfs, sectionTracing))
	c.registerMetrics(section(nfs, sectionMetrics))
	c.registerLogging(section(nfs, sectionLogging))
	for _, rl := range reloads {
		for _, name := range rl.keys {
			lookup(nfs, name).Usage += " (reloadable)"
		}
	}
	return nfs
}

// The sections of --help, as cliflag.PrintSections heads them ("Streaming
// flags:") and docs/flags.md titles its tables.
const (
	sectionRuntime       = "Runtime and socket"
	sectionTarget        = "Target PID namespaces"
	sectionStopSignal    = "Stop signals"
	sectionStreaming     = "Streaming"
	sectionNotifications = "Notifications"
	sectionDebugImages   = "Debug images"
	sectionAudit         = "Audit and recording"
	sectionTracing       = "Tracing"
	sectionMetrics       = "Metrics"
	sectionLogging       = "Logging"
	sectionConfigFile    = "Config file"
	sectionGlobal        = "Global"
)

// section is nfs's flag set named name, keeping its flags in the order
// they are declared: the config file follows it, and a feature's flags
// read best in the order its file gives them.
func section(nfs *cliflag.NamedFlagSets, name string) *pflag.FlagSet {
	fs := nfs.FlagSet(name)
	fs.SortFlags = false
	return fs
}

// merged is every flag of nfs in one set, section after section, for the
// command line and the config file, which know no sections.
func merged(nfs *cliflag.NamedFlagSets) *pflag.FlagSet {
	fs := pflag.NewFlagSet("crishim", pflag.ContinueOnError)
	fs.SortFlags = false
	for _, name := range nfs.Order {
		fs.AddFlagSet(nfs.FlagSets[name])
	}
	return fs
}

// lookup finds the flag name in any section of nfs.
func lookup(nfs *cliflag.NamedFlagSets, name string) *pflag.Flag {
	for _, fs := range nfs.FlagSets {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	panic("crishim: no flag --" + name)
}

// registerRuntime registers the flags of crishim's two ends, the socket
// it serves and the runtime it forwards to.
func (c *config) registerRuntime(fs *pflag.FlagSet) {
	fs.StringVar(&c.listen, "listen", "/run/crishim/crishim.sock", "the CRI socket to serve (mode 0660): /path or unix:///path")
	checkValue(fs, "listen", validEndpoint)
	fs.StringVar(&c.runtimeEndpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "CRI runtime service endpoint: unix:///path or /path")
	checkValue(fs, "runtime-endpoint", validEndpoint)
	fs.StringVar(&c.imageEndpoint, "image-endpoint", "", "CRI image service endpoint: unix:///path or /path; empty means --runtime-endpoint")
	checkValue(fs, "image-endpoint", func(s string) error {
		if s == "" {
			return nil
		}
		return validEndpoint(s)
	})
	fs.IntVar(&c.maxMessageSize, "max-message-size", proxy.DefaultMaxMessageSize, "largest gRPC message in bytes, both ways (the kubelet's limit is 16 MiB)")
	checkValue(fs, "max-message-size", positive)
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	checkValue(fs, "shutdown-timeout", nonNegative)
}

func (c *config) registerMetrics(fs *pflag.FlagSet) {
	fs.StringVar(&c.metricsAddress, "metrics-address", "127.0.0.1:9847", "HOST:PORT for /metrics, /healthz and /readyz; empty disables")
}

func (c *config) registerLogging(fs *pflag.FlagSet) {
	fs.Var(levelValue{&c.logLevel}, "log-level", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	checkValue(fs, "log-format", oneOf("text", "json"))
}

// finish checks what no single value can say and fills the defaults that
// depend on other settings. fs is the flag set of c, whose Changed marks
// say what the command line or the file gave.
func (c *config) finish(fs *pflag.FlagSet) error {
	// Checked by the flag's own Set: a socket path either way it is written.
	c.listen, _ = endpoint.Parse(c.listen)
	if c.imageEndpoint == "" {
		c.imageEndpoint = c.runtimeEndpoint
	}
	if err := notSelf(c.listen, "runtime-endpoint", c.runtimeEndpoint); err != nil {
		return err
	}
	if err := notSelf(c.listen, "image-endpoint", c.imageEndpoint); err != nil {
		return err
	}
	if err := c.target.finish(fs, c.runtimeEndpoint); err != nil {
		return err
	}
	if err := c.stopSignal.finish(c.target.containerdAddress); err != nil {
		return err
	}
	if err := c.streaming.finish(); err != nil {
		return err
	}
	if err := c.notifications.finish(); err != nil {
		return err
	}
	if err := c.debugImages.finish(); err != nil {
		return err
	}
	if err := c.audit.finish(); err != nil {
		return err
	}
	if err := c.record.finish(); err != nil {
		return err
	}
	return c.tracing.finish()
}

// notSelf refuses an endpoint that names crishim's own socket: by path
// (cleaned), or as the same file when both exist (a symlink such as
// /var/run -> /run). Every call would loop back into crishim until it ran
// out of file descriptors.
func notSelf(listen, name, ep string) error {
	path, err := endpoint.Parse(ep)
	if err != nil {
		return fmt.Errorf("--%s: %w", name, err)
	}
	same := path == listen
	if !same {
		a, errA := os.Stat(path)
		b, errB := os.Stat(listen)
		same = errA == nil && errB == nil && os.SameFile(a, b)
	}
	if same {
		return fmt.Errorf("--%s %s is crishim's own socket (--listen %s): point it at the runtime's socket, "+
			"unix:///run/containerd/containerd.sock for containerd or unix:///var/run/crio/crio.sock for CRI-O, "+
			"and the kubelet's --container-runtime-endpoint at crishim's", name, ep, listen)
	}
	return nil
}

// checkValue makes the flag name refuse what check refuses, before its
// value changes, on the command line and in the config file alike.
func checkValue(fs *pflag.FlagSet, name string, check func(string) error) {
	f := fs.Lookup(name)
	f.Value = checkedValue{f.Value, check}
}

type checkedValue struct {
	pflag.Value
	check func(string) error
}

func (v checkedValue) Set(s string) error {
	if err := v.check(s); err != nil {
		return err
	}
	return v.Value.Set(s)
}

// validEndpoint allows a CRI endpoint as the kubelet and crictl write it.
func validEndpoint(s string) error {
	_, err := endpoint.Parse(s)
	return err
}

// oneOf allows the given words only.
func oneOf(choices ...string) func(string) error {
	want := strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
	return func(s string) error {
		for _, c := range choices {
			if s == c {
				return nil
			}
		}
		return fmt.Errorf("want %s", want)
	}
}

// nonNegative refuses negative integers and durations; what does not parse
// is left to the flag's own Set to refuse.
func nonNegative(s string) error {
	if n, ok := number(s); ok && n < 0 {
		return fmt.Errorf("must not be negative")
	}
	return nil
}

func positive(s string) error {
	if n, ok := number(s); ok && n <= 0 {
		return fmt.Errorf("must be positive")
	}
	return nil
}

func number(s string) (int64, bool) {
	if n, err := strconv.ParseInt(s, 0, 64); err == nil {
		return n, true
	}
	if d, err := time.ParseDuration(s); err == nil {
		return int64(d), true
	}
	return 0, false
}

// levelValue is --log-level, spelled in lower case as slog parses it.
type levelValue struct{ l *slog.Level }

func (v levelValue) String() string {
	if v.l == nil {
		return "info"
	}
	return strings.ToLower(v.l.String())
}

func (v levelValue) Set(s string) error {
	if err := v.l.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("want debug, info, warn or error")
	}
	return nil
}

func (levelValue) Type() string { return "string" }

func newLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
