package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"

	"github.com/crishim/crishim/caller"
)

// callerCreds are the transport credentials of crishim's gRPC server. They
// secure nothing (the socket's permissions do that); their handshake names
// each connection's caller, which grpc-go then gives every call on it as
// the peer's AuthInfo (caller.FromContext).
//
// The server serves only the relay's in-memory connections: the relay
// identified the client when it accepted it, and each in-memory connection
// it dials begins with the number under which it left that answer in
// locals (localCallers), for the handshake to take.
type callerCreds struct {
	locals *localCallers
}

// identifyPeer is how a connection's caller is found but in tests.
func identifyPeer(nc net.Conn) *caller.Process {
	p, _ := caller.FromConn(nc) // not a unix socket: no caller
	return p
}

// localIDSize is the length of the number an in-memory connection begins
// with.
const localIDSize = 8

func (c *callerCreds) ServerHandshake(nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	ai := caller.AuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	var b [localIDSize]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return nil, nil, fmt.Errorf("crishim's in-memory connection: read its caller: %w", err)
	}
	ai.Process = c.locals.take(binary.BigEndian.Uint64(b[:]))
	return nc, ai, nil
}

func (c *callerCreds) ClientHandshake(_ context.Context, _ string, nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("crishim's caller credentials are for its server only")
}

func (c *callerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "crishim-peer"}
}

func (c *callerCreds) Clone() credentials.TransportCredentials {
	return &callerCreds{locals: c.locals}
}

func (c *callerCreds) OverrideServerName(string) error { return nil }

// localCallers hands the caller of a relay session to the gRPC server's
// handshake of each in-memory connection the session dials. An entry lives
// from the dial to that handshake, which the server makes for every
// connection it accepts.
type localCallers struct {
	mu   sync.Mutex
	next uint64
	byID map[uint64]*caller.Process
}

func newLocalCallers() *localCallers {
	return &localCallers{byID: map[uint64]*caller.Process{}}
}

func (l *localCallers) add(p *caller.Process) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	l.byID[l.next] = p
	return l.next
}

func (l *localCallers) take(id uint64) *caller.Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.byID[id]
	delete(l.byID, id)
	return p
}

// dialLocal dials the gRPC server's in-memory listener for the session
// whose context is ctx, and begins the connection with its caller's number.
func (l *localCallers) dialLocal(dial func(context.Context) (net.Conn, error)) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		nc, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		id := l.add(caller.FromContext(ctx))
		var b [localIDSize]byte
		binary.BigEndian.PutUint64(b[:], id)
		if _, err := nc.Write(b[:]); err != nil {
			l.take(id)
			_ = nc.Close()
			return nil, fmt.Errorf("crishim's in-memory connection: write its caller: %w", err)
		}
		return nc, nil
	}
}
