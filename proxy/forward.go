package proxy

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// relayDesc describes the backend stream for methods whose shape crishim
// does not know: bidirectional covers unary and every streaming kind.
var relayDesc = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// unaryMethods lists the compiled-in CRI methods that are unary; they take a
// cheaper relay path (one Invoke, no extra goroutine). Everything not listed,
// compiled-in streaming methods and methods newer than the compiled cri-api,
// takes the general stream relay.
var unaryMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, sd := range CRIServices {
		for _, md := range sd.Methods {
			m["/"+sd.ServiceName+"/"+md.MethodName] = true
		}
	}
	return m
}()

// CRIServices are the CRI services of the compiled cri-api.
var CRIServices = []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc}

// MethodNames lists the full method names of the given services.
func MethodNames(descs ...grpc.ServiceDesc) []string {
	var names []string
	for _, sd := range descs {
		for _, md := range sd.Methods {
			names = append(names, "/"+sd.ServiceName+"/"+md.MethodName)
		}
		for _, st := range sd.Streams {
			names = append(names, "/"+sd.ServiceName+"/"+st.StreamName)
		}
	}
	return names
}

// relayHandler is the unknown-service handler of crishim's gRPC server: the
// calls the relay sends there only to be audited (ServerOptions.Audited)
// arrive here and are relayed to the runtime as raw frames, with their
// metadata and deadline, and the runtime's headers, trailers and status come
// back unchanged (its messages too, but for the rewrites given).
func (b *Backend) relayHandler(rw map[string]Rewrite, nf map[string]func(string)) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		return b.forward(ss, rw, nf)
	}
}

func (b *Backend) forward(ss grpc.ServerStream, rw map[string]Rewrite, nf map[string]func(string)) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "crishim: no method name on stream")
	}
	if msg := refusedMethod(method); msg != "" {
		return status.Error(codes.Unimplemented, msg)
	}
	conn := b.connFor(method)
	ctx := ss.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		// The client drops reserved and pseudo headers itself, so the
		// incoming map can be passed on as it is, without a copy.
		ctx = metadata.NewOutgoingContext(ctx, md)
	}

	if unaryMethods[method] {
		var in, out Frame
		if err := ss.RecvMsg(&in); err != nil {
			if errors.Is(err, io.EOF) {
				return status.Errorf(codes.InvalidArgument, "%s: the request message is missing", method)
			}
			return err
		}
		var header, trailer metadata.MD
		err := conn.Invoke(ctx, method, &in, &out, grpc.Header(&header), grpc.Trailer(&trailer))
		if len(header) > 0 {
			if herr := ss.SetHeader(header); herr != nil && err == nil {
				err = herr
			}
		}
		ss.SetTrailer(trailer)
		if err != nil {
			if fn := nf[method]; fn != nil && status.Code(err) == codes.NotFound {
				fn(status.Convert(err).Message())
				return ss.SendMsg(NewFrame(nil))
			}
			return err
		}
		if fn := rw[method]; fn != nil {
			out.rewrite(fn)
		}
		return ss.SendMsg(&out)
	}
	return relayStream(ctx, conn, method, ss, rw[method])
}

// relayStream pumps frames both ways until the runtime ends the call. The
// client-to-runtime pump is owned by this call: when it returns, gRPC ends
// the server stream, which unblocks the pump's RecvMsg, and the canceled
// context ends the runtime stream.
func relayStream(ctx context.Context, conn *grpc.ClientConn, method string, ss grpc.ServerStream, rewrite Rewrite) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := conn.NewStream(ctx, relayDesc, method)
	if err != nil {
		return err
	}
	clientErr := make(chan error, 1)
	go func() {
		for {
			var f Frame
			if err := ss.RecvMsg(&f); err != nil {
				if errors.Is(err, io.EOF) {
					// The client half-closed; tell the runtime the same.
					clientErr <- cs.CloseSend()
					return
				}
				clientErr <- err
				cancel()
				return
			}
			if err := cs.SendMsg(&f); err != nil {
				// The runtime ended the call; its status comes from RecvMsg.
				clientErr <- nil
				return
			}
		}
	}()

	if header, err := cs.Header(); err == nil && len(header) > 0 {
		if err := ss.SendHeader(header); err != nil {
			return err
		}
	}
	for {
		var f Frame
		if err := cs.RecvMsg(&f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			select {
			case cerr := <-clientErr:
				if cerr != nil && status.Code(err) == codes.Canceled {
					// The client went away first; report that, not the
					// cancellation it caused upstream.
					return cerr
				}
			default:
			}
			return err
		}
		if rewrite != nil {
			f.rewrite(rewrite)
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}
