package proxy

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const stopContainerMethod = "/runtime.v1.RuntimeService/StopContainer"

// StopContainer answers by the container ID: "gone" is NotFound, "down"
// Unavailable, anything else OK with a field only the runtime sets (an
// unknown one), so that its own success answer can be told apart.
func (f *fakeRuntime) StopContainer(_ context.Context, in *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	switch in.GetContainerId() {
	case "gone":
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", in.GetContainerId())
	case "down":
		return nil, status.Error(codes.Unavailable, "runtime down")
	}
	resp := &runtimeapi.StopContainerResponse{}
	resp.ProtoReflect().SetUnknown([]byte{0x9a, 0x06, 0x02, 'o', 'k'})
	return resp, nil
}

func TestNotFoundIsOK(t *testing.T) {
	tests := []struct {
		id       string
		code     codes.Code
		answer   []byte // the response message's bytes, on OK
		notFound bool   // the hook saw the runtime's NotFound
	}{
		{id: "gone", code: codes.OK, answer: []byte{}, notFound: true},
		{id: "down", code: codes.Unavailable},
		{id: "there", code: codes.OK, answer: []byte{0x9a, 0x06, 0x02, 'o', 'k'}},
	}
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	var mu sync.Mutex
	var seen []string
	p := startProxy(t, sock, NotFoundIsOK(stopContainerMethod, func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, msg)
	}))
	for _, tt := range tests {
		req, err := proto.Marshal(&runtimeapi.StopContainerRequest{ContainerId: tt.id, Timeout: 3})
		if err != nil {
			t.Fatal(err)
		}
		var out Frame
		err = p.conn.Invoke(context.Background(), stopContainerMethod, NewFrame(req), &out)
		if status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %v", tt.id, err, tt.code)
		}
		if err == nil && string(out.Bytes()) != string(tt.answer) {
			t.Errorf("%s: answer %x, want %x", tt.id, out.Bytes(), tt.answer)
		}
		mu.Lock()
		got := seen
		seen = nil
		mu.Unlock()
		if tt.notFound != (len(got) == 1) || (tt.notFound && !strings.Contains(got[0], `"gone"`)) {
			t.Errorf("%s: the hook saw %q", tt.id, got)
		}
	}
}
