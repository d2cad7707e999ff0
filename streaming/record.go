package streaming

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// resizeMax bounds a resize message held while split between frames: one
// is a TerminalSize in JSON, a few dozen bytes.
const resizeMax = 1 << 10

// recording writes one session's streams to its asciicast file, as the
// tap's sink. A write error ends the recording, never the session.
type recording struct {
	path   string
	f      *os.File
	cast   *audit.Cast
	log    *slog.Logger
	errs   audit.RecordErrors
	resize []byte
	failed bool
}

// startRecording creates the session's recording when the node's mode, or
// the pod's annotation, selects it; nil otherwise. Port-forward carries
// arbitrary TCP, never a terminal: it is never recorded.
func (s *Server) startRecording(kind Kind, p pending, id string, log *slog.Logger) *recording {
	var tty bool
	var argv []string
	switch req := p.req.(type) {
	case *runtimeapi.ExecRequest:
		tty, argv = req.GetTty(), req.GetCmd()
	case *runtimeapi.AttachRequest:
		tty = req.GetTty()
	default:
		return nil
	}
	mode := s.cfg.Record.Mode.Stronger(p.record)
	if !mode.Records(tty) {
		return nil
	}
	if id == "" {
		id = audit.NewID()
	}
	if err := s.recordBudget.Admit(); err != nil {
		s.recordErrors.RecordError()
		log.Warn("session not recorded", "err", err)
		return nil
	}
	f, err := audit.CreateRecording(s.cfg.Record.Dir, id, time.Now())
	if err != nil {
		s.recordErrors.RecordError()
		log.Warn("session not recorded", "err", err)
		return nil
	}
	hdr := audit.CastHeader{Command: strings.Join(argv, " "), Title: string(kind) + " " + podContainer(p.who)}
	return &recording{
		path: f.Name(),
		f:    f,
		cast: audit.NewCast(s.recordBudget.Writer(f), hdr, s.cfg.Record.MaxBytes, s.cfg.Record.Input, time.Now),
		log:  log.With("recording", f.Name()),
		errs: s.recordErrors,
	}
}

// sinks is the recording as the sinks of a translated session: none when
// the session is not recorded.
func (rec *recording) sinks() []streamSink {
	if rec == nil {
		return nil
	}
	return []streamSink{rec}
}

// podContainer names a session's container for the recording's title.
func podContainer(who audit.Event) string {
	name := who.ContainerName
	if name == "" {
		name = who.ContainerID
	}
	if who.PodName != "" {
		return who.PodNamespace + "/" + who.PodName + "/" + name
	}
	return name
}

func (rec *recording) data(typ string, p []byte) {
	switch typ {
	case "stdout", "stderr":
		rec.cast.Output(p)
	case "stdin":
		rec.cast.Input(p)
	case "resize":
		rec.resized(p)
	}
	rec.check(rec.cast.Err())
}

// resized reads remotecommand's resize stream: TerminalSize objects in
// JSON, one per line, which frames may split.
func (rec *recording) resized(p []byte) {
	rec.resize = append(rec.resize, p...)
	for {
		i := bytes.IndexByte(rec.resize, '\n')
		if i < 0 {
			break
		}
		var size struct{ Width, Height uint16 }
		if json.Unmarshal(rec.resize[:i], &size) == nil && size.Width > 0 && size.Height > 0 {
			rec.cast.Resize(int(size.Width), int(size.Height))
		}
		rec.resize = rec.resize[i+1:]
	}
	if len(rec.resize) > resizeMax {
		rec.resize = nil
	}
}

// check reports the error that stopped the recording, once.
func (rec *recording) check(err error) {
	if err != nil && !rec.failed {
		rec.failed = true
		rec.errs.RecordError()
		rec.log.Warn("recording stopped; the session goes on", "err", err)
	}
}

// close ends the file, once the tap's parsers are done.
func (rec *recording) close() {
	if rec == nil {
		return
	}
	rec.check(errors.Join(rec.cast.Close(), rec.f.Close()))
	if rec.cast.Cut() {
		rec.log.Info("recording cut at --record-max-bytes; the session went on")
	}
}
