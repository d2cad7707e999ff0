package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKillRecordedFollowsTheSocket: `make demo-clean` stops a kept demo's crishim by the
// pid and socket its pid file records, also when DEMO_DIR put the socket outside the
// slot; a pid that now belongs to a process without that socket on its command line is
// left alone (pids are reused), and its stale pid file removed.
func TestKillRecordedFollowsTheSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "elsewhere", "crishim.sock")
	start := func(arg0 string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", "read x", arg0) // waits on stdin for ever
		if _, err := cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// Start returns once execve has closed the child's CLOEXEC pipe, which is
		// before the kernel sets up the new argv: for a moment /proc/PID/cmdline is
		// empty, and killRecorded would take the process for another one.
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
			if strings.Contains(string(b), arg0) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d never showed %q on its command line: %q", cmd.Process.Pid, arg0, b)
			}
			time.Sleep(time.Millisecond)
		}
		return cmd
	}
	record := func(cmd *exec.Cmd, sock string) string {
		f := filepath.Join(dir, crishimPidFile)
		if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"+sock+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}

	other := start("/some/other.sock")
	if err := killRecorded(record(other, sock)); err != nil {
		t.Fatal(err)
	}
	// Not reaped here, so a killed one would stay a zombie (state Z).
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(other.Process.Pid) + "/stat"); err != nil || strings.Contains(string(stat), ") Z ") {
		t.Fatalf("a process without the recorded socket was stopped: %s (%v)", stat, err)
	}
	if _, err := os.Stat(filepath.Join(dir, crishimPidFile)); !os.IsNotExist(err) {
		t.Errorf("stale pid file kept: %v", err)
	}

	kept := start(sock)
	done := make(chan error, 1)
	go func() { done <- kept.Wait() }()
	if err := killRecorded(record(kept, sock)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the kept crishim exited 0, want killed by SIGTERM")
		}
	case <-time.After(time.Minute):
		t.Fatal("the kept crishim is still running a minute after demo-clean")
	}
}
