// Package caller says which process on the node is at the other end of a
// connection to crishim's CRI socket: its credentials from the socket
// (SO_PEERCRED) and, read once per connection from /proc while a pidfd of
// it (SO_PEERPIDFD) says it is still the process that connected, what an
// auditor needs to name a person (the login uid and session id that
// survive sudo), the executable and command line, and whether it is the
// kubelet.
//
// The answer travels with each call's context (NewContext, or a gRPC peer's
// AuthInfo) to the audit log and the by-caller metrics.
package caller
