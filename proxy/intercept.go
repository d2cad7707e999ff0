package proxy

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
)

// Method is one intercepted gRPC method: a call crishim decodes and handles
// itself instead of relaying raw bytes.
type Method struct {
	// FullMethod is "/package.Service/Method".
	FullMethod string
	handler    grpc.MethodHandler
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
