package proxy

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
)

// Method is one intercepted gRPC method: a call crishim decodes and handles
// itself instead of relaying raw bytes, or (RewriteResponse) a relayed call
// whose answer crishim amends.
type Method struct {
	// FullMethod is "/package.Service/Method".
	FullMethod string
	handler    grpc.MethodHandler
	rewrite    Rewrite
	notFound   func(msg string) // NotFoundIsOK
	when       func() bool      // When
}

// When intercepts m only while cond holds, asked per call: otherwise the
// relay passes the call through untouched, as if m were not intercepted. It
// suits a method intercepted for a setting that reloads (the audit of the
// kubelet's exec probes), whose calls must not be decoded while it is off.
func (m Method) When(cond func() bool) Method {
	m.when = cond
	return m
}

// Rewrite amends one response message in wire form: it gets the protobuf
// bytes of the message (without gRPC's length prefix) and returns the bytes
// to send instead, msg itself when there is nothing to change. It must not
// keep msg, and it runs on the relay's path: the common case must cost no
// more than a scan of the bytes.
type Rewrite func(msg []byte) []byte

// RewriteResponse relays a unary method raw like any pass-through call (no
// decoding, no gRPC server, the request untouched) and passes each response
// message through fn on its way back. It suits an answer that needs a
// field filled in now and then, where intercepting the method would put the
// kubelet's most frequent calls on the slow path. Compressed messages pass
// as they are (CRI clients do not compress).
func RewriteResponse(fullMethod string, fn Rewrite) Method {
	return Method{FullMethod: fullMethod, rewrite: fn}
}

// rewrites indexes the methods given with RewriteResponse.
func rewrites(methods []Method) map[string]Rewrite {
	m := map[string]Rewrite{}
	for _, md := range methods {
		if md.rewrite != nil {
			m[md.FullMethod] = md.rewrite
		}
	}
	return m
}

// Unary intercepts a unary method with a typed handler. The request is
// decoded into a fresh *Req; the handler usually forwards through a typed
// client on the backend connection after doing its part.
//
// Only the methods given this way are registered with the gRPC server, so a
// CRI method crishim does not intercept can never turn into Unimplemented.
func Unary[Req any, Resp any](fullMethod string, fn func(context.Context, *Req) (Resp, error)) Method {
	return Method{
		FullMethod: fullMethod,
		handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(Req)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return fn(ctx, in)
			}
			info := &grpc.UnaryServerInfo{FullMethod: fullMethod}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return fn(ctx, req.(*Req))
			})
		},
	}
}

// serviceDescs groups intercepted methods into one partial service
// description per service. HandlerType stays nil: the handlers are closures,
// there is no server interface to satisfy.
func serviceDescs(methods []Method) ([]*grpc.ServiceDesc, error) {
	byService := map[string]*grpc.ServiceDesc{}
	var order []*grpc.ServiceDesc
	seen := map[string]bool{}
	for _, m := range methods {
		service, name, ok := splitMethod(m.FullMethod)
		if !ok {
			return nil, fmt.Errorf("intercepted method %q is not of the form /package.Service/Method", m.FullMethod)
		}
		if seen[m.FullMethod] {
			return nil, fmt.Errorf("intercepted method %q given twice", m.FullMethod)
		}
		seen[m.FullMethod] = true
		if m.rewrite != nil || m.notFound != nil {
			continue // relayed, not served
		}
		sd := byService[service]
		if sd == nil {
			sd = &grpc.ServiceDesc{ServiceName: service}
			byService[service] = sd
			order = append(order, sd)
		}
		sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: name, Handler: m.handler})
	}
	return order, nil
}

func splitMethod(full string) (service, method string, ok bool) {
	rest, ok := strings.CutPrefix(full, "/")
	if !ok {
		return "", "", false
	}
	service, method, ok = strings.Cut(rest, "/")
	return service, method, ok && service != "" && method != "" && !strings.Contains(method, "/")
}
