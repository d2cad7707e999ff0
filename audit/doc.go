// Package audit writes crishim's audit log (--audit-log): one JSON line when
// a session starts and one when it ends, sharing an ID, for every exec,
// attach and port-forward through crishim's streaming server, every debug
// container create, every crishim.v1 Signal and Notify call, and ExecSync
// when asked. Never a token, never stream contents: those go, for the
// sessions selected (--record-sessions), to one asciicast v2 recording per
// session, which the ended event names.
package audit
