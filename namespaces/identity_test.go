package namespaces

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestPIDNamespaceOfProcesses(t *testing.T) {
	self, err := PIDNamespace(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.Ino == 0 {
		t.Fatalf("namespace of self has inode 0: %+v", self)
	}
	// A child without CLONE_NEWPID shares ours.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child, err := PIDNamespace(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if child != self {
		t.Errorf("child in %v, self in %v; want the same", child, self)
	}
	if got, want := self.String(), "pid:["; len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("String() = %q", got)
	}
}

func TestPIDNamespaceOfMissingProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true binary:", err)
	}
	for _, pid := range []int{0, -1, cmd.Process.Pid} {
		if _, err := PIDNamespace(pid); !errors.Is(err, ErrNoProcess) {
			t.Errorf("PIDNamespace(%d) = %v, want ErrNoProcess", pid, err)
		}
	}
}

func TestPIDFromVerboseInfo(t *testing.T) {
	tests := []struct {
		name string
		info map[string]string
		want int
	}{
		{"containerd", map[string]string{"info": `{"sandboxID":"x","pid":4242,"removing":false}`}, 4242},
		{"no info", map[string]string{}, 0},
		{"not json", map[string]string{"info": `pid=1`}, 0},
		{"no pid", map[string]string{"info": `{"sandboxID":"x"}`}, 0},
		{"exited", map[string]string{"info": `{"pid":0}`}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PIDFromVerboseInfo(tt.info)
			if tt.want == 0 {
				if err == nil {
					t.Fatalf("got pid %d, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
