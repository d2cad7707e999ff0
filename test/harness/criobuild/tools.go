//go:build tools

// Package criobuild pins the CRI-O release the test harness builds and runs when asked for
// RUNTIME=crio (test/harness/crio*.go). It is a module of its own so that crishim's module
// never depends on github.com/cri-o/cri-o, and `go vet ./...` in the repository stops at it.
package criobuild

import (
	_ "github.com/cri-o/cri-o/cmd/crio"
)
