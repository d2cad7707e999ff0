package nodeinstall

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestLockOneNodeAtATime: while one node's installer holds the Lease, another's waits (its
// attempts to take it are seen, its work does not start); once the first is done, the
// second runs. In a synctest bubble: the Lease's RetryPeriod (2 s) passes on the bubble's
// clock, not the wall's.
func TestLockOneNodeAtATime(t *testing.T) { synctest.Test(t, testLockOneNodeAtATime) }

func testLockOneNodeAtATime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := fake.NewClientset()
	var leaseCalls atomic.Int64
	cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		leaseCalls.Add(1)
		return false, nil, nil
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lock := func(id string) Lock {
		return Lock{Client: cs, Namespace: "crishim-installer", Name: "crishim-node-installer", Identity: id, Log: log}
	}
	var inside atomic.Int32
	var order []string
	var mu sync.Mutex
	work := func(id string, hold <-chan struct{}) func(context.Context) error {
		return func(context.Context) error {
			if inside.Add(1) != 1 {
				t.Errorf("%s works while another node holds the Lease", id)
			}
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			if hold != nil {
				<-hold
			}
			inside.Add(-1)
			return nil
		}
	}
	firstIn, release := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	go func() {
		errs <- lock("node-a").Do(ctx, func(ctx context.Context) error {
			close(firstIn)
			return work("node-a", release)(ctx)
		})
	}()
	<-firstIn
	go func() { errs <- lock("node-b").Do(ctx, work("node-b", nil)) }()
	// node-b has tried the Lease a few times (every RetryPeriod) while node-a holds it.
	seen := leaseCalls.Load()
	for leaseCalls.Load() < seen+4 {
		select {
		case <-ctx.Done():
			t.Fatal("node-b never tried the Lease")
		case <-time.After(100 * time.Millisecond):
		}
	}
	mu.Lock()
	if len(order) != 1 {
		t.Errorf("while node-a holds the Lease: %v worked", order)
	}
	mu.Unlock()
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(order) != 2 || order[0] != "node-a" || order[1] != "node-b" {
		t.Errorf("order %v, want node-a then node-b", order)
	}
}
