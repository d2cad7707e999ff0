// Package proxy is crishim's transport: it listens on the kubelet-facing unix
// socket, dials the runtime, and relays every gRPC call it is not told to
// intercept as raw wire bytes, so pass-through calls are never decoded and
// methods newer than the compiled cri-api reach the runtime intact.
//
// The one place where a call stops being pass-through is the Method list given
// to NewServer (see Unary): everything else is relayed. The relay (h2*.go)
// relays HTTP/2 frames, and reaches the intercepted methods on an in-memory
// connection to crishim's gRPC server; that server relays on, as raw
// messages (forward.go), the calls it sees only to audit them
// (ServerOptions.Audited).
//
// The relay's files are named for what they hold, a file's tests beside
// it: h2relay.go (listeners, sessions, shutdown), h2session.go (one client
// connection and its calls), h2dial.go and h2upstream.go (an upstream
// connection's dial, then its reader), h2conn.go (one connection: framing,
// its writer, its peer's settings), h2rawio.go (raw socket I/O),
// h2headers.go (header blocks), h2paths.go and h2route.go (routing by
// :path), h2streams.go (where a session keeps its open calls), h2flow.go
// (one direction of a call under flow control), h2window.go (window
// arithmetic), h2windowframes.go (WINDOW_UPDATE and SETTINGS),
// h2bytequeue.go (bytes waiting for a window), h2msglimit.go (the message
// size limit), h2rewrite.go (answers under RewriteResponse), h2status.go
// (calls crishim ends itself), h2floodguard.go (flood policing),
// h2protoerr.go (protocol errors, counted and logged) and h2observe.go
// (how relayed calls are counted). socketwatch.go watches the runtime's
// socket, to reconnect at once when a restarted runtime creates it anew.
// The relay's timer tests (GOAWAY, header block and handshake bounds) run
// in a testing/synctest bubble over in-memory connections
// (h2bubble_test.go).
package proxy

// # The relay's goroutines, and who owns what
//
// As x/net's http2/server.go states its rules, so here (h2relay.go,
// h2session.go, h2conn.go, h2upstream.go, h2dial.go):
//
//   - relay.serve runs one accept loop per listener; it starts one
//     goroutine per accepted connection, which runs session.run and ends
//     with the session (relay.sessWG). relay.shutdown waits for them, then
//     kills what is left.
//   - session.run is the client connection's reader: it alone reads
//     session.client (br, fr, hr, tap, grow). For each upstream connection
//     one goroutine dials it and then reads it (session.dial,
//     session.readUpstream), owning that connection's reader fields; the
//     session's teardown waits for them (session.wg) after closing every
//     connection.
//   - A reader handles each frame under session.mu, which guards the
//     session's state (its calls, their flows, the upstream connections,
//     the flood guard) and each connection's flow-control fields (send,
//     recv, peer settings, blocked). A reader writes straight into the
//     destination connection's buffer, under that connection's wmu, which
//     guards the writer, the HPACK encoder and werr.
//   - session.connMu guards the list of the session's sockets for kill,
//     which must never wait for session.mu (a reader holding it may be
//     stuck writing to a peer that does not read): closing the sockets is
//     what unsticks it. h2conn.close takes no lock for the same reason.
//
// Lock order: relay.mu → session.mu → h2conn.wmu, and relay.mu →
// session.connMu → h2conn.wmu. session.mu and session.connMu are never
// held together, and today relay.mu is not held with session.mu either
// (shutdown lets it go before it asks the sessions to go away); nothing
// takes a lock to the left of one it holds. No lock is held across a
// blocking read; wmu is held across a write to the socket, which is why
// only close unsticks a writer. Where a function needs a lock its caller
// holds, its comment says so and, in tests, mustHold checks it
// (lockcheck.go).
