// Package shim holds crishim's CRI services: which calls are intercepted and
// what crishim adds to them, and crishim's own crishim.v1 API. Everything not
// listed by Shim.Intercepted is relayed untouched by package proxy.
package shim
