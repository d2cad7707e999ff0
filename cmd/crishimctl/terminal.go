package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// streamOptions says what a stream session carries; they must match the
// Exec or Attach request the URL was issued for.
type streamOptions struct {
	Stdin  io.Reader // nil: no stdin
	Stdout io.Writer
	Stderr io.Writer // unused with TTY: a TTY has one output stream
	TTY    bool
}

// streamURL carries stdio over an Exec or Attach URL (crishim's, or a
// runtime's) until the remote process ends; a non-zero exit comes back as an
// error with ExitStatus(). With TTY and a terminal on stdin, the terminal is
// raw for the session and its size follows the window.
//
// SPDY only: stream URLs are single use, so kubectl's WebSocket-first
// fallback would spend the URL on a protocol runtimes do not serve (v5) and
// find it gone for SPDY.
func streamURL(ctx context.Context, rawURL string, opts streamOptions) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("stream URL %q: %w", rawURL, err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		return fmt.Errorf("stream %s: %w", u.Redacted(), err)
	}
	so := remotecommand.StreamOptions{Stdin: opts.Stdin, Stdout: opts.Stdout, Tty: opts.TTY}
	if !opts.TTY {
		so.Stderr = opts.Stderr
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if f, ok := opts.Stdin.(*os.File); ok && opts.TTY && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("terminal raw mode: %w", err)
		}
		defer func() { _ = term.Restore(int(f.Fd()), old) }()
		so.TerminalSizeQueue = watchSize(ctx, int(f.Fd()))
	}
	return exec.StreamWithContext(ctx, so)
}

// isTerminal says whether r is a terminal a TTY session can drive.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// sizeQueue sends the terminal's size at the start and on every SIGWINCH
// until ctx ends.
type sizeQueue chan remotecommand.TerminalSize

func watchSize(ctx context.Context, fd int) sizeQueue {
	q := make(sizeQueue, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		defer close(q)
		defer signal.Stop(winch)
		for {
			if w, h, err := term.GetSize(fd); err == nil {
				select {
				case q <- remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-winch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return q
}

// Next implements remotecommand.TerminalSizeQueue; nil ends the resizes.
func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}
