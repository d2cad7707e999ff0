package streaming

import (
	"container/list"
	"encoding/base64"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crishim/crishim/audit"
)

// Kind is what a token opens; it is also the first segment of its URL path.
type Kind string

// The three kinds of stream a CRI runtime serves. A kind also names its
// sessions' audit events: one vocabulary, audit's.
const (
	Exec        Kind = audit.KindExec
	Attach      Kind = audit.KindAttach
	PortForward Kind = audit.KindPortForward
)

// Kinds lists every kind, in URL path order.
var Kinds = []Kind{Exec, Attach, PortForward}

// tokenBytes is the token's entropy: 256 bits, twice the 128 bits a guesser
// would have to beat, for 43 URL-safe characters.
const tokenBytes = 32

// lookup is how presenting a token ended.
type lookup int

const (
	found   lookup = iota
	unknown        // never issued, already used, swept, or issued for another kind
	expired        // issued, presented after its TTL
)

// cache keeps requests behind single-use tokens. One TTL for every token
// means insertion order is expiry order, so expired entries are always at the
// front of byAge and a sweep stops at the first live one.
type cache struct {
	ttl    time.Duration
	max    int
	now    func() time.Time
	random io.Reader
	// onExpire is told the kind of each token that reached its TTL unused.
	onExpire func(Kind)

	mu      sync.Mutex
	entries map[string]*list.Element
	byAge   *list.List // of *entry, oldest first
}

type entry struct {
	token   string
	kind    Kind
	req     any
	expires time.Time
}

func newCache(ttl time.Duration, max int, now func() time.Time, random io.Reader, onExpire func(Kind)) *cache {
	return &cache{
		ttl:      ttl,
		max:      max,
		now:      now,
		random:   random,
		onExpire: onExpire,
		entries:  map[string]*list.Element{},
		byAge:    list.New(),
	}
}

// insert keeps req behind a fresh token. Expired tokens are swept first so
// that they never count against the limit.
func (c *cache) insert(kind Kind, req any) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked()
	if c.byAge.Len() >= c.max {
		return "", status.Errorf(codes.ResourceExhausted,
			"streaming: %d stream tokens outstanding, the maximum (--stream-max-tokens); retry when they are used or expire (--stream-token-ttl %s)", c.max, c.ttl)
	}
	token, err := c.newToken()
	if err != nil {
		return "", err
	}
	c.entries[token] = c.byAge.PushBack(&entry{token: token, kind: kind, req: req, expires: c.now().Add(c.ttl)})
	return token, nil
}

// newToken draws random tokens until one is unused; with 256 bits a second
// draw never happens in practice, the loop only makes uniqueness certain.
func (c *cache) newToken() (string, error) {
	raw := make([]byte, tokenBytes)
	for {
		if _, err := io.ReadFull(c.random, raw); err != nil {
			return "", status.Errorf(codes.Internal, "streaming: token: %v", err)
		}
		token := base64.RawURLEncoding.EncodeToString(raw)
		if _, taken := c.entries[token]; !taken {
			return token, nil
		}
	}
}

// consume removes the token, whatever happens next: a token is good for one
// presentation, even a failed one.
func (c *cache) consume(kind Kind, token string) (any, lookup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[token]
	if !ok {
		return nil, unknown
	}
	e := c.remove(el)
	if !c.now().Before(e.expires) {
		c.onExpire(e.kind)
		return nil, expired
	}
	if e.kind != kind {
		return nil, unknown
	}
	return e.req, found
}

// sweep drops expired tokens and says how many went.
func (c *cache) sweep() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sweepLocked()
}

func (c *cache) sweepLocked() int {
	now := c.now()
	n := 0
	for el := c.byAge.Front(); el != nil; el = c.byAge.Front() {
		e := el.Value.(*entry)
		if now.Before(e.expires) {
			break
		}
		c.remove(el)
		c.onExpire(e.kind)
		n++
	}
	return n
}

func (c *cache) remove(el *list.Element) *entry {
	e := c.byAge.Remove(el).(*entry)
	delete(c.entries, e.token)
	return e
}

// len is the number of outstanding tokens, expired ones not yet swept
// included.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAge.Len()
}

func (k Kind) String() string { return string(k) }
