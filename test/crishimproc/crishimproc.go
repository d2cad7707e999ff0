// Package crishimproc runs the crishim binary for end-to-end tests and the
// demo: started with JSON logs into a file, ready once it logs that it
// serves, stopped with SIGTERM as systemd would.
package crishimproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Build compiles crishim and crishimctl from this checkout into dir, for tests that run
// the real binaries.
func Build(ctx context.Context, dir string) error {
	for _, cmd := range []string{"crishim", "crishimctl"} {
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, cmd), "github.com/crishim/crishim/cmd/"+cmd)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build %s: %w", cmd, err)
		}
	}
	return nil
}

// Options say how to run crishim.
type Options struct {
	Binary          string   // path of the crishim binary
	Socket          string   // --listen
	RuntimeEndpoint string   // --runtime-endpoint
	LogPath         string   // file that receives crishim's log (JSON)
	Args            []string // more flags
	// Listener, when set, is a listening socket at Socket handed to crishim
	// as systemd hands crishim.socket's (socket activation): fd 3,
	// $LISTEN_FDS=1, $LISTEN_PID crishim's own PID. It stays the caller's.
	Listener *os.File
	// Detach runs crishim in its own session so it outlives this process
	// (make demo KEEP=1); otherwise it dies with this process.
	Detach bool
}

// Process is a running crishim.
type Process struct {
	Cmd      *exec.Cmd
	Socket   string
	Endpoint string // unix:// + Socket
	Metrics  string // host:port of /metrics, /healthz, /readyz
	logPath  string
	exited   chan struct{}
	exitErr  error
}

// readyTimeout bounds the wait for crishim's first log line; it turns a hang
// into an error, it measures nothing.
const readyTimeout = 30 * time.Second

// Start runs crishim with metrics on a free loopback port and waits until it
// serves.
func Start(opts Options) (*Process, error) {
	logFile, err := os.Create(opts.LogPath)
	if err != nil {
		return nil, fmt.Errorf("crishim log: %w", err)
	}
	defer logFile.Close()
	args := append([]string{
		"--listen", opts.Socket,
		"--runtime-endpoint", opts.RuntimeEndpoint,
		"--metrics-address", "127.0.0.1:0",
		"--log-format", "json",
		// Never the machine's /etc/crishim/config.toml; a test's own
		// --config in Args comes later and wins.
		"--config", "",
	}, opts.Args...)
	cmd := exec.Command(opts.Binary, args...)
	if opts.Listener != nil {
		// $LISTEN_PID must be crishim's PID, unknown before the fork: a
		// shell sets it to its own and execs crishim, which keeps it.
		cmd = exec.Command("/bin/sh", append([]string{"-c", `export LISTEN_PID=$$; exec "$0" "$@"`, opts.Binary}, args...)...)
		cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "LISTEN_FDNAMES=crishim.socket")
		cmd.ExtraFiles = []*os.File{opts.Listener}
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if opts.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start crishim: %w", err)
	}
	p := &Process{Cmd: cmd, Socket: opts.Socket, Endpoint: "unix://" + opts.Socket, logPath: opts.LogPath, exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(readyTimeout)
	for {
		if addr, ok := p.servingAddr(); ok {
			p.Metrics = addr
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("crishim exited at start: %v\n%s", p.exitErr, p.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("crishim did not serve within %s\n%s", readyTimeout, p.Log())
		}
	}
}

// servingAddr finds crishim's "serving" line, which names the metrics address.
func (p *Process) servingAddr() (string, bool) {
	f, err := os.Open(p.logPath)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg     string `json:"msg"`
			Metrics string `json:"metrics"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "crishim serving" {
			return rec.Metrics, true
		}
	}
	return "", false
}

// Log is what crishim has logged so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return strings.TrimRight(string(b), "\n")
}

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop sends SIGTERM and waits for the exit; it returns the exit error.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return p.exitErr
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitErr
	case <-time.After(readyTimeout):
		_ = p.Cmd.Process.Kill()
		<-p.exited
		return errors.New("crishim ignored SIGTERM")
	}
}
