package main

import (
	"context"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// interleaved reports as many calls per target as each target took, warm-up
// included (the CPU per 1000 calls divides by it), gives every target a new
// connection per generation, and a sample per target per round.
func TestInterleavedCountsEveryCallAndReconnects(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fake.sock")
	stop, err := serveFake(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var targets []*target
	for _, name := range []string{"a", "b"} {
		tg, err := dialTarget(name, sock, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer tg.close()
		targets = append(targets, tg)
	}
	for _, n := range []int{7, 300, 3000} {
		made := map[string]int{}
		conns := map[*target]map[any]bool{}
		taken := 0
		count := func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
			for _, tg := range targets {
				if tg.rt == rt {
					made[tg.name]++
					if conns[tg] == nil {
						conns[tg] = map[any]bool{}
					}
					conns[tg][tg.conn] = true
				}
			}
			taken++
			return nil
		}
		lat, calls, err := interleaved(context.Background(), targets, count, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range targets {
			if len(lat[tg.name]) != n {
				t.Errorf("n=%d: %s has %d samples, want %d", n, tg.name, len(lat[tg.name]), n)
			}
			if made[tg.name] != calls {
				t.Errorf("n=%d: %s took %d calls, interleaved says %d", n, tg.name, made[tg.name], calls)
			}
			if want := generations(n); len(conns[tg]) != want {
				t.Errorf("n=%d: %s used %d connections, want %d", n, tg.name, len(conns[tg]), want)
			}
		}
		if taken != calls*len(targets) {
			t.Errorf("n=%d: %d calls in all, want %d", n, taken, calls*len(targets))
		}
	}
}
