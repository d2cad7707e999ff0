// Package namespaces answers Linux questions about container processes that
// the CRI cannot: which PID namespace a process lives in, and whether two
// processes share one. Identity is the namespace file's device and inode, as
// the kernel defines it; names and paths are never compared.
package namespaces
