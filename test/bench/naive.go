package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
)

// rawCodec passes message bytes through untouched: the obvious design of a
// gRPC forwarder, which the benchmark reports beside crishim.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// runNaiveForwarder is the process the benchmark starts as its reference
// point: a grpc-go server whose unknown-service handler relays raw bytes
// through a grpc-go client, with nothing else. It serves until killed.
func runNaiveForwarder(listen, backend string) error {
	conn, err := grpc.NewClient("unix://"+backend, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return fmt.Errorf("dial backend: %w", err)
	}
	defer conn.Close()
	_ = os.Remove(listen)
	ln, err := net.Listen("unix", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	gs := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(ss)
			md, _ := metadata.FromIncomingContext(ss.Context())
			ctx := metadata.NewOutgoingContext(ss.Context(), md)
			cs, err := conn.NewStream(ctx, desc, method)
			if err != nil {
				return err
			}
			go func() {
				for {
					var b []byte
					if err := ss.RecvMsg(&b); err != nil {
						_ = cs.CloseSend()
						return
					}
					if err := cs.SendMsg(&b); err != nil {
						return
					}
				}
			}()
			for {
				var b []byte
				if err := cs.RecvMsg(&b); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := ss.SendMsg(&b); err != nil {
					return err
				}
			}
		}))
	fmt.Println("ready")
	return gs.Serve(ln)
}
