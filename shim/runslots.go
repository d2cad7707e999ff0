package shim

import (
	"context"
	"fmt"
)

// Bounds on notifier runs in flight (actions and probes), whatever the
// number of Notify calls: each run is an exec or a signal in a container,
// and a runtime asked for a thousand execs in one container at once wedges.
const (
	// notifyPerContainer bounds the runs in one container.
	notifyPerContainer = 2
	// notifyTotal bounds the runs on the node.
	notifyTotal = 32
)

// runSlots bounds concurrent notifier runs per container and overall. A run
// over a bound waits for a slot, as long as its context and its notifier's
// timeout allow; the zero value has no bounds.
type runSlots struct {
	perKey keyLock       // n: runs per container
	all    chan struct{} // nil: no overall bound
	// onWait, when set (tests), is called when a run has to wait.
	onWait func()
}

func newRunSlots(perContainer, total int) *runSlots {
	return &runSlots{perKey: keyLock{n: perContainer}, all: make(chan struct{}, total)}
}

// acquire takes a slot for a run in container id: per container first (a
// run queued behind its own container holds no node-wide slot), then on
// the node.
func (s *runSlots) acquire(ctx context.Context, id string) (func(), error) {
	if s == nil {
		return func() {}, nil
	}
	unlock, err := s.perKey.lockWait(ctx, id, s.onWait)
	if err != nil {
		return nil, fmt.Errorf("%d notifier runs already in flight in this container (at most %d at once)", max(1, s.perKey.n), max(1, s.perKey.n))
	}
	if s.all == nil {
		return unlock, nil
	}
	select {
	case s.all <- struct{}{}:
	default:
		if s.onWait != nil {
			s.onWait()
		}
		select {
		case s.all <- struct{}{}:
		case <-ctx.Done():
			unlock()
			return nil, fmt.Errorf("%d notifier runs already in flight on this node (at most %d at once)", cap(s.all), cap(s.all))
		}
	}
	return func() { <-s.all; unlock() }, nil
}
