package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The header is Go benchmark format's configuration lines (its proposal,
// 14313-benchmark-data.md: a lower-case key without spaces, a colon and a
// value); the results are its result lines, with /backend= and /target= in
// the name for benchstat's -col /target.
func TestOutputIsGoBenchmarkFormat(t *testing.T) {
	configLine := regexp.MustCompile(`^[a-z][^\sA-Z:]*:(\s.*)?$`)
	var header bytes.Buffer
	printHeader(&header)
	for _, line := range strings.Split(strings.TrimSuffix(header.String(), "\n"), "\n") {
		if !configLine.MatchString(line) {
			t.Errorf("header line %q is not a configuration line", line)
		}
	}
	lat := map[string][]time.Duration{
		"direct":  {50 * time.Microsecond, 60 * time.Microsecond, 70 * time.Microsecond},
		"crishim": {120 * time.Microsecond, 130 * time.Microsecond, 900 * time.Microsecond},
		"pipe":    {110 * time.Microsecond, 115 * time.Microsecond, 200 * time.Microsecond},
	}
	var got []string
	for _, r := range latencyResults("fake", "ListContainers300", []*target{{name: "direct"}, {name: "pipe"}, {name: "crishim"}}, lat) {
		got = append(got, r.String())
	}
	got = append(got, result{name: benchName("RSS", "fake", "crishim"), n: 200000, metrics: []metric{{31.25, "rss-MiB"}, {-0.5, "rss-growth-MiB"}}}.String())
	want := []string{
		"BenchmarkListContainers300/backend=fake/target=direct\t3\t60000 ns/op\t60000 p99-ns",
		"BenchmarkListContainers300/backend=fake/target=pipe\t3\t115000 ns/op\t115000 p99-ns\t55000 added-ns/op",
		"BenchmarkListContainers300/backend=fake/target=crishim\t3\t130000 ns/op\t130000 p99-ns\t70000 added-ns/op",
		"BenchmarkRSS/backend=fake/target=crishim\t200000\t31.25 rss-MiB\t-0.5 rss-growth-MiB",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("results\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// recorder is a runtime client that logs its Version calls as target#client.
type recorder struct {
	internalapi.RuntimeService // nil: only Version and Close are called
	name                       string
	log                        *[]string
	closed                     *int
}

func (r recorder) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	*r.log = append(*r.log, r.name)
	return &runtimeapi.VersionResponse{}, nil
}

func (r recorder) Close(context.Context) error {
	*r.closed++
	return nil
}

// Every round calls every target once, in an order that changes from round
// to round (no target always first, none always after another), and every
// roundsPerGeneration rounds each target gets a new client, the old one
// closed.
func TestInterleavedRoundsShuffledAndNewClientsEveryGeneration(t *testing.T) {
	var log []string
	var closed int
	dials := map[string]int{}
	var ts []*target
	for i := range 4 {
		name := "t" + strconv.Itoa(i)
		ts = append(ts, &target{name: name, dial: func(context.Context) (internalapi.RuntimeService, error) {
			dials[name]++
			return recorder{name: name + "#" + strconv.Itoa(dials[name]), log: &log, closed: &closed}, nil
		}})
	}
	const rounds, generations = 4*roundsPerGeneration + 1, 5
	lat, err := interleaved(context.Background(), rand.New(rand.NewPCG(1, 2)), ts, version, rounds)
	if err != nil {
		t.Fatal(err)
	}
	orders, firsts, perClient := map[string]bool{}, map[string]bool{}, map[string]int{}
	for i := 0; i < len(log); i += len(ts) {
		var round []string
		for _, call := range log[i : i+len(ts)] {
			perClient[call]++
			name, _, _ := strings.Cut(call, "#")
			round = append(round, name)
		}
		orders[strings.Join(round, " ")] = true
		firsts[round[0]] = true
		if slices.Sort(round); !slices.Equal(round, []string{"t0", "t1", "t2", "t3"}) {
			t.Fatalf("round %d called %v, want each target once", i/len(ts), round)
		}
	}
	if len(firsts) != len(ts) || len(orders) < 12 {
		t.Fatalf("%d orders over %d rounds, %d targets ever first: want shuffled rounds", len(orders), len(log)/len(ts), len(firsts))
	}
	for _, tg := range ts {
		if len(lat[tg.name]) != rounds || dials[tg.name] != generations {
			t.Fatalf("%s: %d latencies from %d clients, want %d from %d", tg.name, len(lat[tg.name]), dials[tg.name], rounds, generations)
		}
	}
	if want := len(ts) * (generations - 1); closed != want {
		t.Fatalf("%d clients closed, want %d (all but the current ones)", closed, want)
	}
	for client, n := range perClient {
		if n > warmRounds+roundsPerGeneration {
			t.Fatalf("client %s made %d calls, more than a generation's %d", client, n, warmRounds+roundsPerGeneration)
		}
	}
}

func TestGuardOnMediansOverRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		naive   int
		crishim []int // one run each; the pipe adds 50000 in every run
		ok      bool
	}{
		{"one run over, the median under", 150000, []int{60000, 90000, 65000}, true},
		{"the median over the pipe's 1.4x", 150000, []int{60000, 71000, 72000}, false},
		{"under the pipe's line but not 2x better than naive", 120000, []int{65000, 65000, 65000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs strings.Builder
			for _, c := range tc.crishim {
				for target, added := range map[string]int{"pipe": 50000, "crishim": c, "naive": tc.naive} {
					r := result{name: benchName("Version", "fake", target), n: 1, metrics: []metric{{100, "ns/op"}, {float64(added), "added-ns/op"}}}
					runs.WriteString(r.String() + "\n")
				}
			}
			added, err := readAdded(strings.NewReader(runs.String()))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := guard(&out, added); (err == nil) != tc.ok {
				t.Fatalf("guard: %v, want ok=%v\n%s", err, tc.ok, out.String())
			}
		})
	}
	if err := guard(&bytes.Buffer{}, map[string][]float64{}); err == nil {
		t.Fatal("guard passed with nothing measured")
	}
}
