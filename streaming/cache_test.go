package streaming

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeClock is the cache's only notion of time in these tests: no test here
// waits for anything.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

type cacheStep struct {
	op      string // insert, consume, advance, sweep
	kind    Kind
	ref     string        // which inserted token (by name) to present; "" with consume = a never-issued token
	d       time.Duration // advance
	wantErr codes.Code    // insert
	want    lookup        // consume
	wantN   int           // sweep: how many went
}

func TestCache(t *testing.T) {
	const ttl = time.Minute
	tests := []struct {
		name        string
		max         int
		steps       []cacheStep
		wantExpired []Kind
		wantLen     int
	}{
		{
			name: "a token is good once",
			max:  10,
			steps: []cacheStep{
				{op: "insert", kind: Exec, ref: "a"},
				{op: "consume", kind: Exec, ref: "a", want: found},
				{op: "consume", kind: Exec, ref: "a", want: unknown},
			},
		},
		{
			name: "a never-issued token is unknown",
			max:  10,
			steps: []cacheStep{
				{op: "insert", kind: Exec, ref: "a"},
				{op: "consume", kind: Exec, want: unknown},
			},
			wantLen: 1,
		},
		{
			name: "a token presented for another kind is burnt",
			max:  10,
			steps: []cacheStep{
				{op: "insert", kind: Exec, ref: "a"},
				{op: "consume", kind: PortForward, ref: "a", want: unknown},
				{op: "consume", kind: Exec, ref: "a", want: unknown},
			},
		},
		{
			name: "good until just before the TTL",
			max:  10,
			steps: []cacheStep{
				{op: "insert", kind: Attach, ref: "a"},
				{op: "advance", d: ttl - time.Nanosecond},
				{op: "consume", kind: Attach, ref: "a", want: found},
			},
		},
		{
			name: "expired at the TTL, counted once",
			max:  10,
			steps: []cacheStep{
				{op: "insert", kind: Attach, ref: "a"},
				{op: "advance", d: ttl},
				{op: "consume", kind: Attach, ref: "a", want: expired},
				{op: "consume", kind: Attach, ref: "a", want: unknown},
			},
			wantExpired: []Kind{Attach},
		},
		{
			name: "sweep removes expired tokens only, oldest first",
			max:  10,
			steps: []cacheStep{
				{op: "insert", kind: Exec, ref: "old"},
				{op: "insert", kind: PortForward, ref: "old2"},
				{op: "advance", d: ttl / 2},
				{op: "insert", kind: Attach, ref: "young"},
				{op: "advance", d: ttl / 2},
				{op: "sweep", wantN: 2},
				{op: "sweep", wantN: 0},
				{op: "consume", kind: Exec, ref: "old", want: unknown},
				{op: "consume", kind: Attach, ref: "young", want: found},
			},
			wantExpired: []Kind{Exec, PortForward},
		},
		{
			name: "full: ResourceExhausted until a token is used",
			max:  2,
			steps: []cacheStep{
				{op: "insert", kind: Exec, ref: "a"},
				{op: "insert", kind: Exec, ref: "b"},
				{op: "insert", kind: Exec, wantErr: codes.ResourceExhausted},
				{op: "consume", kind: Exec, ref: "a", want: found},
				{op: "insert", kind: Exec, ref: "c"},
			},
			wantLen: 2,
		},
		{
			name: "full: expired tokens do not count against the limit",
			max:  1,
			steps: []cacheStep{
				{op: "insert", kind: Exec, ref: "a"},
				{op: "insert", kind: Exec, wantErr: codes.ResourceExhausted},
				{op: "advance", d: ttl},
				{op: "insert", kind: Exec, ref: "b"},
				{op: "consume", kind: Exec, ref: "b", want: found},
			},
			wantExpired: []Kind{Exec},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			var expiredKinds []Kind
			c := newCache(ttl, tt.max, clock.now, rand.Reader, func(k Kind) { expiredKinds = append(expiredKinds, k) })
			tokens := map[string]string{}
			for i, st := range tt.steps {
				switch st.op {
				case "insert":
					tok, err := c.insert(st.kind, "request "+st.ref)
					if status.Code(err) != st.wantErr {
						t.Fatalf("step %d: insert: %v, want code %v", i, err, st.wantErr)
					}
					if err == nil {
						tokens[st.ref] = tok
					}
				case "consume":
					tok := "never-issued"
					if st.ref != "" {
						tok = tokens[st.ref]
					}
					req, got := c.consume(st.kind, tok)
					if got != st.want {
						t.Fatalf("step %d: consume %s: lookup %d, want %d", i, st.ref, got, st.want)
					}
					if got == found && req != "request "+st.ref {
						t.Fatalf("step %d: consume %s gave %v", i, st.ref, req)
					}
				case "advance":
					clock.advance(st.d)
				case "sweep":
					if n := c.sweep(); n != st.wantN {
						t.Fatalf("step %d: sweep removed %d, want %d", i, n, st.wantN)
					}
				}
			}
			if got := strings.Join(kindStrings(expiredKinds), ","); got != strings.Join(kindStrings(tt.wantExpired), ",") {
				t.Errorf("expired %q, want %q", got, kindStrings(tt.wantExpired))
			}
			if c.len() != tt.wantLen {
				t.Errorf("%d tokens left, want %d", c.len(), tt.wantLen)
			}
		})
	}
}

func kindStrings(ks []Kind) []string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return s
}

func TestTokensAreLongURLSafeAndDistinct(t *testing.T) {
	c := newCache(time.Minute, 1000, time.Now, rand.Reader, func(Kind) {})
	seen := map[string]bool{}
	for range 1000 {
		tok, err := c.insert(Exec, nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(raw)*8 < 128 {
			t.Fatalf("token %q: %d bits (%v), want at least 128 URL-safe", tok, len(raw)*8, err)
		}
		if seen[tok] {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = true
	}
}

// A random source that repeats itself must not make two requests share a
// token.
func TestTokenCollisionIsRedrawn(t *testing.T) {
	a := bytes.Repeat([]byte{1}, tokenBytes)
	b := bytes.Repeat([]byte{2}, tokenBytes)
	src := io.MultiReader(bytes.NewReader(a), bytes.NewReader(a), bytes.NewReader(b))
	c := newCache(time.Minute, 10, time.Now, src, func(Kind) {})
	t1, err1 := c.insert(Exec, 1)
	t2, err2 := c.insert(Exec, 2)
	if err1 != nil || err2 != nil || t1 == t2 {
		t.Fatalf("tokens %q (%v), %q (%v)", t1, err1, t2, err2)
	}
}

func TestBrokenRandomSourceIsAnError(t *testing.T) {
	c := newCache(time.Minute, 10, time.Now, bytes.NewReader(nil), func(Kind) {})
	if _, err := c.insert(Exec, 1); status.Code(err) != codes.Internal {
		t.Fatalf("insert with no randomness: %v, want Internal", err)
	}
}
