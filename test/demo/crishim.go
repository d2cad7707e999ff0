package main

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// startCrishim starts the demo's crishim with its socket and log in dir. A
// kept crishim gets its own session and a pid file in the slot's directory,
// naming it and its socket, so `make demo-clean` can find it.
func startCrishim(bin, dir string, cd *harness.Containerd, keep bool) (*crishimproc.Process, error) {
	p, err := crishimproc.Start(crishimproc.Options{
		Binary:          bin,
		Socket:          filepath.Join(dir, "crishim.sock"),
		RuntimeEndpoint: cd.Endpoint,
		LogPath:         filepath.Join(dir, "crishim.log"),
		Args:            []string{"--containerd-address", cd.ContainerdAddress},
		Detach:          keep,
	})
	if err != nil {
		return nil, err
	}
	if keep {
		pid := strconv.Itoa(p.Cmd.Process.Pid) + "\n" + p.Socket + "\n"
		if err := os.WriteFile(filepath.Join(cd.Dir, crishimPidFile), []byte(pid), 0o644); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// stopCrishim shows the graceful shutdown: SIGTERM, socket removed, exit 0.
func stopCrishim(p *crishimproc.Process) {
	say("Stopping crishim (SIGTERM: in-flight calls finish, socket removed)")
	err := p.Stop()
	if _, serr := os.Stat(p.Socket); os.IsNotExist(serr) {
		detail("socket %s removed", p.Socket)
	}
	detail("exit status: %v", exitText(err))
}

func exitText(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}
