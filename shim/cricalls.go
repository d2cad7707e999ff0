package shim

import (
	"cmp"
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim/crishimv1"
)

// readOnlyMethods are the calls that change nothing on the node: at level
// mutating (--audit-cri-calls) they are not audited. Every other method is,
// those newer than the compiled cri-api too (crishim cannot tell what they
// do).
var readOnlyMethods = map[string]bool{
	runtimeapi.RuntimeService_Version_FullMethodName:                 true,
	runtimeapi.RuntimeService_Status_FullMethodName:                  true,
	runtimeapi.RuntimeService_RuntimeConfig_FullMethodName:           true,
	runtimeapi.RuntimeService_PodSandboxStatus_FullMethodName:        true,
	runtimeapi.RuntimeService_ListPodSandbox_FullMethodName:          true,
	runtimeapi.RuntimeService_StreamPodSandboxes_FullMethodName:      true,
	runtimeapi.RuntimeService_ListContainers_FullMethodName:          true,
	runtimeapi.RuntimeService_StreamContainers_FullMethodName:        true,
	runtimeapi.RuntimeService_ContainerStatus_FullMethodName:         true,
	runtimeapi.RuntimeService_ContainerStats_FullMethodName:          true,
	runtimeapi.RuntimeService_ListContainerStats_FullMethodName:      true,
	runtimeapi.RuntimeService_StreamContainerStats_FullMethodName:    true,
	runtimeapi.RuntimeService_PodSandboxStats_FullMethodName:         true,
	runtimeapi.RuntimeService_ListPodSandboxStats_FullMethodName:     true,
	runtimeapi.RuntimeService_StreamPodSandboxStats_FullMethodName:   true,
	runtimeapi.RuntimeService_GetContainerEvents_FullMethodName:      true,
	runtimeapi.RuntimeService_ListMetricDescriptors_FullMethodName:   true,
	runtimeapi.RuntimeService_ListPodSandboxMetrics_FullMethodName:   true,
	runtimeapi.RuntimeService_StreamPodSandboxMetrics_FullMethodName: true,
	runtimeapi.ImageService_ListImages_FullMethodName:                true,
	runtimeapi.ImageService_StreamImages_FullMethodName:              true,
	runtimeapi.ImageService_ImageStatus_FullMethodName:               true,
	runtimeapi.ImageService_ImageFsInfo_FullMethodName:               true,
	crishimv1.Crishim_Status_FullMethodName:                          true,
}

// verboseReads are the read-only calls whose verbose answer (the runtime's
// info map) says more than a status: ContainerStatus's holds the
// container's whole config, its environment too, often secrets (`crictl
// inspect`); PodSandboxStatus's the sandbox's config, ImageStatus's the
// image's. At level mutating they are audited when verbose.
var verboseReads = map[string]bool{
	runtimeapi.RuntimeService_ContainerStatus_FullMethodName:  true,
	runtimeapi.RuntimeService_PodSandboxStatus_FullMethodName: true,
	runtimeapi.ImageService_ImageStatus_FullMethodName:        true,
}

// CRICallsAudited says which methods crishim's gRPC server must see, decoded,
// at level (audit.CRICalls*) when called by anything but the kubelet; nil
// for none. At level mutating that is the verbose reads too, whose request
// then decides (auditsRequest): the others pass through undecoded.
func CRICallsAudited(level string) func(fullMethod string) bool {
	switch level {
	case audit.CRICallsAll:
		return func(string) bool { return true }
	case audit.CRICallsMutating:
		return func(m string) bool { return !readOnlyMethods[m] || verboseReads[m] }
	}
	return nil
}

// auditsRequest says whether a call of method that CRICallsAudited selects
// at level is audited, given its request: a verbose read at level
// mutating only when it asks for verbose. req is a decoded message or a
// relayed *proxy.Frame.
func auditsRequest(level, method string, req any) bool {
	if level != audit.CRICallsMutating || !verboseReads[method] {
		return true
	}
	var m protoreflect.Message
	switch r := req.(type) {
	case *proxy.Frame:
		md := methodDescriptor(method)
		if md == nil {
			return true
		}
		dm := dynamicpb.NewMessage(md.Input())
		if err := proto.Unmarshal(r.Bytes(), dm); err != nil {
			return true // the runtime will refuse it: audited, as any doubt
		}
		m = dm
	case proto.Message:
		if r == nil {
			return true
		}
		m = r.ProtoReflect()
	default:
		return true
	}
	fd := m.Descriptor().Fields().ByName("verbose")
	return fd == nil || fd.Kind() != protoreflect.BoolKind || m.Get(fd).Bool()
}

// CRICallInterceptors audit the calls of callers other than the kubelet
// (kind criCall) as --audit-cri-calls asks: the caller, the method, the
// container or pod sandbox the call names (its full ID and pod, looked up
// in the runtime before the call goes on, so a removal still finds them)
// and the code. The kubelet's calls pass by after one check of their
// connection's caller.
//
// They see every call crishim's gRPC server runs: the intercepted ones,
// decoded, and the audited calls of other callers, which the relay sends
// there (proxy.ServerOptions.Audited), as raw messages that they decode
// only for the fields that name a container or pod sandbox.
func (s *Shim) CRICallInterceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	level := s.opts.Audit.CRICalls()
	audited := CRICallsAudited(level)
	watch := func(ctx context.Context, method string) (*caller.Process, bool) {
		if audited == nil {
			return nil, false
		}
		p := caller.FromContext(ctx)
		return p, !p.IsKubelet() && audited(method)
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		p, ok := watch(ctx, info.FullMethod)
		if !ok || !auditsRequest(level, info.FullMethod, req) {
			return handler(ctx, req)
		}
		sess := s.opts.Audit.Start(s.criCallStart(ctx, info.FullMethod, p, targetOf(req)))
		if err := sess.Refused(); err != nil {
			return nil, auditRefused(err) // --audit-required: not unrecorded
		}
		resp, err := handler(ctx, req)
		sess.End(func(ev *audit.Event) {
			auditEnd(err)(ev)
			fillTarget(ev, targetOf(resp))
		})
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		p, ok := watch(ss.Context(), info.FullMethod)
		if !ok {
			return handler(srv, ss)
		}
		as := &auditedStream{ServerStream: ss, s: s, method: info.FullMethod, caller: p, level: level}
		err := handler(srv, as)
		as.start(nil, func() target { return target{} }) // a call that ended before its request
		as.sess.End(func(ev *audit.Event) {
			auditEnd(err)(ev)
			fillTarget(ev, as.answer)
		})
		return err
	}
	return unary, stream
}

// criCallStart is the started event of an audited call.
func (s *Shim) criCallStart(ctx context.Context, method string, p *caller.Process, t target) audit.Event {
	ev := s.auditTarget(ctx, t)
	ev.Kind, ev.Method, ev.Caller = audit.KindCRICall, method, p
	// What the request says of a pod or container that does not exist yet.
	ev.PodNamespace = cmp.Or(ev.PodNamespace, t.pod.namespace)
	ev.PodName = cmp.Or(ev.PodName, t.pod.name)
	ev.PodUID = cmp.Or(ev.PodUID, t.pod.uid)
	ev.ContainerName = cmp.Or(ev.ContainerName, t.containerName)
	return ev
}

// auditTarget names the container or pod sandbox a call is about as the
// runtime knows them: the full ID (a client may give a prefix, which
// runtimes resolve) and the pod. An ID the runtime does not know is kept as
// given.
func (s *Shim) auditTarget(ctx context.Context, t target) audit.Event {
	ev := audit.Event{ContainerID: t.containerID, PodSandboxID: t.podSandboxID}
	if t.containerID != "" {
		if st, err := s.runtimeClient().ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: t.containerID}); err == nil {
			ev = auditWho(st.GetStatus())
			ev.PodSandboxID = t.podSandboxID
		}
	}
	if t.podSandboxID != "" {
		if st, err := s.runtimeClient().PodSandboxStatus(toRuntime(ctx), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: t.podSandboxID}); err == nil {
			md := st.GetStatus().GetMetadata()
			ev.PodSandboxID = st.GetStatus().GetId()
			ev.PodNamespace, ev.PodName, ev.PodUID = md.GetNamespace(), md.GetName(), md.GetUid()
		}
	}
	return ev
}

// target is what a CRI or crishim.v1 message says it is about: IDs, and
// the metadata of a pod or container being made (RunPodSandbox,
// CreateContainer).
type target struct {
	containerID, podSandboxID string
	pod                       struct{ namespace, name, uid string }
	containerName             string
}

// targetOf reads the container_id and pod_sandbox_id fields of a message,
// where it has them.
func targetOf(msg any) target {
	m, ok := msg.(proto.Message)
	if !ok || m == nil {
		return target{}
	}
	return targetOfReflect(m.ProtoReflect())
}

func targetOfReflect(m protoreflect.Message) target {
	if !m.IsValid() {
		return target{}
	}
	t := target{containerID: stringField(m, "container_id"), podSandboxID: stringField(m, "pod_sandbox_id")}
	// RunPodSandbox: config is a PodSandboxConfig; CreateContainer: config
	// a ContainerConfig, sandbox_config the pod's. A pod's metadata has a
	// uid, a container's not.
	for _, name := range []protoreflect.Name{"config", "sandbox_config"} {
		md := messageField(messageField(m, name), "metadata")
		if md == nil {
			continue
		}
		if md.Descriptor().Fields().ByName("uid") != nil {
			t.pod.namespace, t.pod.name, t.pod.uid = stringField(md, "namespace"), stringField(md, "name"), stringField(md, "uid")
		} else {
			t.containerName = stringField(md, "name")
		}
	}
	return t
}

// stringField is m's singular string field name, or "".
func stringField(m protoreflect.Message, name protoreflect.Name) string {
	if m == nil {
		return ""
	}
	if fd := m.Descriptor().Fields().ByName(name); fd != nil && fd.Kind() == protoreflect.StringKind && fd.Cardinality() != protoreflect.Repeated {
		return m.Get(fd).String()
	}
	return ""
}

// messageField is m's singular message field name when set, or nil.
func messageField(m protoreflect.Message, name protoreflect.Name) protoreflect.Message {
	if m == nil {
		return nil
	}
	fd := m.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.MessageKind || fd.Cardinality() == protoreflect.Repeated || !m.Has(fd) {
		return nil
	}
	return m.Get(fd).Message()
}

// hasTarget says whether messages of md can name a container or sandbox.
func hasTarget(md protoreflect.MessageDescriptor) bool {
	if md == nil {
		return false
	}
	f := md.Fields()
	return f.ByName("container_id") != nil || f.ByName("pod_sandbox_id") != nil || f.ByName("config") != nil
}

// fillTarget adds what the answer names (RunPodSandbox's new sandbox,
// CreateContainer's new container) to an ended event.
func fillTarget(ev *audit.Event, t target) {
	if ev.ContainerID == "" {
		ev.ContainerID = t.containerID
	}
	if ev.PodSandboxID == "" {
		ev.PodSandboxID = t.podSandboxID
	}
}

// methodDescriptor finds a compiled method's protobuf description; nil for
// a method crishim does not know.
func methodDescriptor(fullMethod string) protoreflect.MethodDescriptor {
	service, name, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	return sd.Methods().ByName(protoreflect.Name(name))
}

// rawTarget decodes a relayed message of type md for its target.
func rawTarget(md protoreflect.MessageDescriptor, f *proxy.Frame) target {
	if !hasTarget(md) {
		return target{}
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(f.Bytes(), m); err != nil {
		return target{}
	}
	return targetOfReflect(m)
}

// auditedStream is a call's server stream while it is audited: its first
// message each way says what the call is about. Relayed calls carry
// *proxy.Frame, intercepted ones decoded messages.
//
// A relayed stream's requests are read by a goroutine of the relay's that
// may still be in RecvMsg when the handler has returned: once orders the
// started event and sess between the two.
type auditedStream struct {
	grpc.ServerStream
	s       *Shim
	method  string
	caller  *caller.Process
	level   string // of --audit-cri-calls
	once    sync.Once
	sess    *audit.Session
	answer  target // the handler's goroutine only
	replied bool
}

// start writes the started event, the first time only, unless the
// request (nil: none came) is not audited (auditsRequest): then the call
// has no session.
func (as *auditedStream) start(req any, t func() target) {
	as.once.Do(func() {
		if req != nil && !auditsRequest(as.level, as.method, req) {
			return
		}
		as.sess = as.s.opts.Audit.Start(as.s.criCallStart(as.Context(), as.method, as.caller, t()))
	})
}

// RecvMsg writes the started event once the request is in, before the
// handler sends it on.
func (as *auditedStream) RecvMsg(m any) error {
	err := as.ServerStream.RecvMsg(m)
	var req any
	if err == nil {
		req = m
	}
	as.start(req, func() target {
		if err != nil {
			return target{}
		}
		if f, ok := m.(*proxy.Frame); ok {
			if md := methodDescriptor(as.method); md != nil {
				return rawTarget(md.Input(), f)
			}
			return target{}
		}
		return targetOf(m)
	})
	if err == nil {
		if rerr := as.sess.Refused(); rerr != nil {
			// --audit-required: the request goes no further unrecorded.
			return auditRefused(rerr)
		}
	}
	return err
}

// SendMsg reads the first answer for the IDs it names.
func (as *auditedStream) SendMsg(m any) error {
	if !as.replied {
		as.replied = true
		if f, ok := m.(*proxy.Frame); ok {
			if md := methodDescriptor(as.method); md != nil {
				as.answer = rawTarget(md.Output(), f)
			}
		} else {
			as.answer = targetOf(m)
		}
	}
	return as.ServerStream.SendMsg(m)
}
