package shim

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The modes every feature that a runtime may or may not provide takes
// (--pid-target-mode, --stop-signal-mode): crishim leaves it to the runtime
// (native), provides it itself (emulate), or decides by runtime (auto).
const (
	ModeAuto    = "auto"
	ModeNative  = "native"
	ModeEmulate = "emulate"
)

// ParseMode checks a mode flag's value; empty means auto.
func ParseMode(s string) (string, error) {
	switch s {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeNative, ModeEmulate:
		return s, nil
	}
	return "", fmt.Errorf("%q: want auto, native or emulate", s)
}

// configuredMode is a feature's parsed mode. The daemon validates its flags;
// a library caller with a typo gets auto, the safe choice.
func configuredMode(s string) string {
	mode, err := ParseMode(s)
	if err != nil {
		return ModeAuto
	}
	return mode
}

// runtimeVersion asks the runtime who it is, for auto mode's decision: the
// runtime behind crishim can be upgraded while crishim runs, so the answer
// is not cached. feature names what the decision is about, for the error.
func runtimeVersion(ctx context.Context, rs runtimeapi.RuntimeServiceClient, feature string) (*runtimeapi.VersionResponse, error) {
	v, err := rs.Version(toRuntime(ctx), &runtimeapi.VersionRequest{})
	if err != nil {
		st := status.Convert(err)
		return nil, status.Errorf(st.Code(), "crishim: runtime Version (to choose how to provide %s): %s", feature, st.Message())
	}
	return v, nil
}

// logger is the shim's logger for one feature.
func (s *Shim) logger(feature string) *slog.Logger {
	log := s.opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return log.With("feature", feature)
}
