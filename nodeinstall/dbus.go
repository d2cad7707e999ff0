package nodeinstall

import (
	"context"
	"fmt"
	"os"
	"strconv"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// SystemdPrivateSocket is systemd's own D-Bus socket (no dbus-daemon in between), which
// answers root only. The installer pod mounts the host's /run/systemd to reach it: that is
// how it restarts the kubelet and starts crishim without nsenter or a privileged container.
const SystemdPrivateSocket = "/run/systemd/private"

// DBusSystemd is Systemd over the host's systemd D-Bus API.
type DBusSystemd struct{ conn *sddbus.Conn }

// DialSystemd connects to the systemd whose private socket is at path.
func DialSystemd(ctx context.Context, path string) (*DBusSystemd, error) {
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+path, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		// EXTERNAL with the uid, as go-systemd does for its own connection (no user lookup in
		// a static binary); systemd takes root only.
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("systemd's D-Bus at %s: %w", path, err)
	}
	return &DBusSystemd{conn: conn}, nil
}

// Close closes the connection.
func (s *DBusSystemd) Close() { s.conn.Close() }

// Reload is `systemctl daemon-reload`.
func (s *DBusSystemd) Reload(ctx context.Context) error {
	if err := s.conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("systemd daemon-reload: %w", err)
	}
	return nil
}

// Enable is `systemctl enable units...` (forced: an old link is replaced).
func (s *DBusSystemd) Enable(ctx context.Context, units ...string) error {
	if _, _, err := s.conn.EnableUnitFilesContext(ctx, units, false, true); err != nil {
		return fmt.Errorf("systemd enable %v: %w", units, err)
	}
	return nil
}

// Disable is `systemctl disable units...`.
func (s *DBusSystemd) Disable(ctx context.Context, units ...string) error {
	if _, err := s.conn.DisableUnitFilesContext(ctx, units, false); err != nil {
		return fmt.Errorf("systemd disable %v: %w", units, err)
	}
	return nil
}

// Start is `systemctl start unit`: it returns when the job is done.
func (s *DBusSystemd) Start(ctx context.Context, unit string) error {
	return s.job(ctx, "start", unit, s.conn.StartUnitContext)
}

// Restart is `systemctl restart unit`.
func (s *DBusSystemd) Restart(ctx context.Context, unit string) error {
	return s.job(ctx, "restart", unit, s.conn.RestartUnitContext)
}

// Stop is `systemctl stop unit`.
func (s *DBusSystemd) Stop(ctx context.Context, unit string) error {
	return s.job(ctx, "stop", unit, s.conn.StopUnitContext)
}

func (s *DBusSystemd) job(ctx context.Context, verb, unit string, f func(context.Context, string, string, chan<- string) (int, error)) error {
	done := make(chan string, 1)
	if _, err := f(ctx, unit, "replace", done); err != nil {
		return fmt.Errorf("systemd %s %s: %w", verb, unit, err)
	}
	select {
	case r := <-done:
		if r != "done" {
			return fmt.Errorf("systemd %s %s: job %s (journalctl -u %s on the node)", verb, unit, r, unit)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd %s %s: %w", verb, unit, ctx.Err())
	}
}

// FragmentPath is the unit's file, "" for a unit systemd has no file of.
func (s *DBusSystemd) FragmentPath(ctx context.Context, unit string) (string, error) {
	p, err := s.conn.GetUnitPropertyContext(ctx, unit, "FragmentPath")
	if err != nil {
		return "", fmt.Errorf("systemd %s FragmentPath: %w", unit, err)
	}
	v, _ := p.Value.Value().(string)
	return v, nil
}
