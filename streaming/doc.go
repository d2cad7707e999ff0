// Package streaming is crishim's own streaming server for exec, attach and
// port-forward: CRI Exec, Attach and PortForward answer with a crishim URL
// holding a single-use token, and when the client connects crishim asks the
// runtime for its URL and proxies the upgraded connection (SPDY or
// WebSocket) to it, so every stream passes through crishim.
package streaming
