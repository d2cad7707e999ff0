// Package streaming is crishim's own streaming server for exec, attach and
// port-forward: CRI Exec, Attach and PortForward answer with a crishim URL
// holding a single-use token, and when the client connects crishim asks the
// runtime for its URL and proxies the upgraded connection (SPDY or
// WebSocket) to it, so every stream passes through crishim.
//
// Listen takes two things: a Config, the settings an operator chooses
// (address, tokens, TLS, recording), plain values validated on their own;
// and Deps, what the server works with (the runtime, metrics, log, audit
// log, record-error counter, tracer), built by crishim's wiring.
package streaming
