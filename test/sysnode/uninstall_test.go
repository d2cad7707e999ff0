package sysnode

import (
	"context"
	"strings"
	"testing"
	"time"
)

// This file's name sorts last: go test runs a package's tests file by file in name
// order, and the purge takes crishim off the node the other tests use.

// TestDebPurge (last: it takes crishim off the node): `apt-get purge` stops crishim and
// crishim.socket, removes their units and enablement, the socket file and the config
// file, and leaves what it does not own: the audit log directory systemd made.
func TestDebPurge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := testNode.NodeExec(ctx, "apt-get", "purge", "-y", "crishim"); err != nil {
		t.Fatal(err)
	}
	out, err := testNode.NodeExec(ctx, "sh", "-c", `
systemctl is-active crishim || true
systemctl cat crishim >/dev/null 2>&1 && echo unit-present
test -e /etc/systemd/system/multi-user.target.wants/crishim.service && echo still-enabled
test -e /etc/crishim/config.toml && echo config-present
test -e /usr/bin/crishim && echo binary-present
systemctl is-active crishim.socket || true
test -e /etc/systemd/system/sockets.target.wants/crishim.socket && echo socket-still-enabled
test -e /run/crishim/crishim.sock && echo socket-file-present
test -d /var/log/crishim && echo logs-kept
true`)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	want := []string{"inactive", "inactive", "logs-kept"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after apt-get purge: got %q, want %q", got, want)
	}
}
