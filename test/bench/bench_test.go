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

// Go benchmark format, from its proposal (14313-benchmark-data.md): a
// configuration line is a key (starting with a lower-case letter, no
// spaces or upper case) a colon and a value; a result line is a name
// starting with "Benchmark" and then not a lower-case letter, the
// iteration count, and value-unit pairs, fields separated by white space.
var (
	configLine = regexp.MustCompile(`^[a-z][^\sA-Z:]*:(\s.*)?$`)
	resultName = regexp.MustCompile(`^Benchmark([^a-z\s]\S*)?$`)
)

func checkResultLine(t *testing.T, line string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !resultName.MatchString(f[0]) {
		t.Fatalf("%q: want BenchmarkNAME N VALUE UNIT [VALUE UNIT...]", line)
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		t.Fatalf("%q: iterations %q: %v", line, f[1], err)
	}
	for i := 2; i < len(f); i += 2 {
		if _, err := strconv.ParseFloat(f[i], 64); err != nil {
			t.Fatalf("%q: value %q: %v", line, f[i], err)
		}
	}
	// benchstat's -col /target needs the target as a key of the name.
	if !strings.Contains(f[0], "/target=") || !strings.Contains(f[0], "/backend=") {
		t.Fatalf("%q: want /backend= and /target= keys in the name", line)
	}
}

func TestOutputIsGoBenchmarkFormat(t *testing.T) {
	var buf bytes.Buffer
	printHeader(&buf)
	lat := map[string][]time.Duration{
		"direct":  {50 * time.Microsecond, 60 * time.Microsecond, 70 * time.Microsecond},
		"crishim": {120 * time.Microsecond, 130 * time.Microsecond, 900 * time.Microsecond},
		"pipe":    {110 * time.Microsecond, 115 * time.Microsecond, 200 * time.Microsecond},
	}
	rs := latencyResults("fake", "ListContainers300", []string{"direct", "pipe", "crishim"}, lat)
	rs = append(rs, result{name: benchName("RSS", "fake", "crishim"), n: 200000, metrics: []metric{{31.25, "rss-MiB"}, {-0.5, "rss-growth-MiB"}}})
	for _, r := range rs {
		buf.WriteString(r.String() + "\n")
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	results := 0
	for _, line := range lines {
		if strings.HasPrefix(line, "Benchmark") {
			checkResultLine(t, line)
			results++
		} else if !configLine.MatchString(line) {
			t.Fatalf("%q is neither a configuration nor a result line", line)
		}
	}
	if results != 4 {
		t.Fatalf("%d result lines, want 4:\n%s", results, buf.String())
	}
	// The numbers: median as ns/op, what it adds to direct's median.
	if got, want := rs[2].String(), "BenchmarkListContainers300/backend=fake/target=crishim\t3\t130000 ns/op\t130000 p99-ns\t70000 added-ns/op"; got != want {
		t.Fatalf("crishim's line\n%s\nwant\n%s", got, want)
	}
}

// recorder is a runtime client that logs its Version calls by target.
type recorder struct {
	internalapi.RuntimeService // nil: only Version and Close are called
	target                     string
	client                     int
	log                        *[]string
	closed                     *int
}

func (r recorder) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	*r.log = append(*r.log, r.target+"#"+strconv.Itoa(r.client))
	return &runtimeapi.VersionResponse{}, nil
}

func (r recorder) Close(context.Context) error {
	*r.closed++
	return nil
}

// recordingTargets are n targets whose clients log to log; dials counts
// each target's clients.
func recordingTargets(n int, log *[]string, dials map[string]int, closed *int) []*target {
	var ts []*target
	for i := range n {
		name := "t" + strconv.Itoa(i)
		ts = append(ts, &target{name: name, dial: func(context.Context) (internalapi.RuntimeService, error) {
			dials[name]++
			return recorder{target: name, client: dials[name], log: log, closed: closed}, nil
		}})
	}
	return ts
}

// Every round calls every target once, in an order that changes from
// round to round: no target is always first, none always follows another.
func TestInterleavedRoundsCallEveryTargetInShuffledOrder(t *testing.T) {
	var log []string
	var closed int
	ts := recordingTargets(4, &log, map[string]int{}, &closed)
	const rounds = 100
	lat, err := interleaved(context.Background(), rand.New(rand.NewPCG(1, 2)), ts, version(), rounds)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range ts {
		if len(lat[tg.name]) != rounds {
			t.Fatalf("%s: %d latencies, want %d", tg.name, len(lat[tg.name]), rounds)
		}
	}
	orders := map[string]bool{}
	firsts := map[string]bool{}
	for i := 0; i < len(log); i += len(ts) {
		var round []string
		for _, call := range log[i : i+len(ts)] {
			name, _, _ := strings.Cut(call, "#")
			round = append(round, name)
		}
		orders[strings.Join(round, " ")] = true
		firsts[round[0]] = true
		slices.Sort(round)
		if !slices.Equal(round, []string{"t0", "t1", "t2", "t3"}) {
			t.Fatalf("round %d called %v, want each target once", i/len(ts), round)
		}
	}
	if len(firsts) != len(ts) || len(orders) < 12 {
		t.Fatalf("%d orders over %d rounds, %d targets ever first: want shuffled rounds", len(orders), len(log)/len(ts), len(firsts))
	}
}

// Every roundsPerGeneration rounds each target gets a new client, and the
// old one is closed: no client makes more than a generation's calls.
func TestInterleavedNewClientsEveryGeneration(t *testing.T) {
	var log []string
	var closed int
	dials := map[string]int{}
	ts := recordingTargets(3, &log, dials, &closed)
	const rounds = 4*roundsPerGeneration + 1
	if _, err := interleaved(context.Background(), rand.New(rand.NewPCG(1, 2)), ts, version(), rounds); err != nil {
		t.Fatal(err)
	}
	const generations = 5
	for _, tg := range ts {
		if dials[tg.name] != generations {
			t.Fatalf("%s: %d clients for %d rounds, want %d", tg.name, dials[tg.name], rounds, generations)
		}
	}
	if want := len(ts) * (generations - 1); closed != want {
		t.Fatalf("%d clients closed, want %d (all but the current ones)", closed, want)
	}
	perClient := map[string]int{}
	for _, call := range log {
		perClient[call]++
	}
	for client, n := range perClient {
		if n > warmRounds+roundsPerGeneration {
			t.Fatalf("client %s made %d calls, more than a generation's %d", client, n, warmRounds+roundsPerGeneration)
		}
	}
}

func TestGuardOnMediansOverRuns(t *testing.T) {
	runs := func(naive int, crishim ...int) string {
		var b strings.Builder
		for _, c := range crishim {
			for _, r := range []result{
				{name: benchName("Version", "fake", "pipe"), n: 1, metrics: []metric{{100, "ns/op"}, {50000, "added-ns/op"}}},
				{name: benchName("Version", "fake", "crishim"), n: 1, metrics: []metric{{100, "ns/op"}, {float64(c), "added-ns/op"}}},
				{name: benchName("Version", "fake", "naive"), n: 1, metrics: []metric{{100, "ns/op"}, {float64(naive), "added-ns/op"}}},
			} {
				b.WriteString(r.String() + "\n")
			}
		}
		return b.String()
	}
	for _, tc := range []struct {
		name    string
		naive   int
		crishim []int
		ok      bool
	}{
		{"one run over, the median under", 150000, []int{60000, 90000, 65000}, true},
		{"the median over the pipe's 1.4x", 150000, []int{60000, 71000, 72000}, false},
		{"under the pipe's line but not 2x better than naive", 120000, []int{65000, 65000, 65000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			added, err := readAdded(strings.NewReader(runs(tc.naive, tc.crishim...)))
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
