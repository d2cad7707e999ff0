// Package hup catches SIGHUP from the start of the process. Its init runs as
// soon as os/signal is initialized, before the packages whose init is slow
// (grpc, the containerd client, Kubernetes' API machinery: tens of
// milliseconds on a loaded node), so a SIGHUP sent while crishim starts (a
// `systemctl reload` racing a restart) is kept for the reloader instead of
// ending the process with the signal's default action.
package hup

import (
	"os"
	"os/signal"
	"syscall"
)

// C receives SIGHUP from process start on. One pending signal is kept: a
// reload asked for while crishim starts is done once it runs.
var C = make(chan os.Signal, 1)

func init() { signal.Notify(C, syscall.SIGHUP) }
