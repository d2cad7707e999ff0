package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// crishimProc is the demo's crishim.
type crishimProc struct {
	cmd     *exec.Cmd
	sock    string
	metrics string
}

// startCrishim starts crishim and waits for its "serving" log line, which
// also says where the metrics are. A kept crishim gets its own session and
// a pid file so `make demo-clean` can find it.
func startCrishim(bin, sock string, cd *harness.Containerd, keep bool) (*crishimProc, error) {
	logPath := filepath.Join(cd.Dir, "crishim.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--listen", sock, "--runtime-endpoint", cd.Endpoint,
		"--metrics-address", "127.0.0.1:0", "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if keep {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start crishim: %w", err)
	}
	p := &crishimProc{cmd: cmd, sock: sock}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if keep {
		if err := os.WriteFile(filepath.Join(cd.Dir, crishimPidFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("crishim exited: %v\n%s", err, log)
		default:
		}
		if addr := servingAddr(logPath); addr != "" {
			p.metrics = addr
			return p, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return nil, fmt.Errorf("crishim did not start serving within 30s (log: %s)", logPath)
}

// servingAddr finds crishim's start line in its JSON log.
func servingAddr(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Msg     string `json:"msg"`
			Metrics string `json:"metrics"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "crishim serving" {
			return rec.Metrics
		}
	}
	return ""
}

func (p *crishimProc) stop() {
	say("Stopping crishim (SIGTERM: in-flight calls finish, socket removed)")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	for range 100 {
		if _, err := os.Stat(p.sock); os.IsNotExist(err) {
			detail("socket %s removed", p.sock)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
