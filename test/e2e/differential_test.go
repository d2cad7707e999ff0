package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// step is one recorded CRI call: its normalized response or its error code
// and message.
type step struct {
	Call     string
	Response any    `json:",omitempty"`
	Code     string `json:",omitempty"`
	Message  string `json:",omitempty"`
}

// recorder runs a script and remembers each call's outcome with the
// run-specific parts (IDs, times, addresses) replaced by placeholders.
type recorder struct {
	steps []step
	ids   map[string]string // runtime-made ID -> placeholder
}

func (r *recorder) placeholder(id string) string {
	if id == "" {
		return ""
	}
	if p, ok := r.ids[id]; ok {
		return p
	}
	p := fmt.Sprintf("<id%d>", len(r.ids))
	r.ids[id] = p
	return p
}

// volatile names the fields whose values differ from run to run by nature.
var volatile = regexp.MustCompile(`(?i)^(createdAt|startedAt|finishedAt|timestamp|ip|additionalIps|pid|usageBytes|inodesUsed|usageCoreNanoSeconds|usageNanoCores|workingSetBytes|availableBytes|rssBytes|pageFaults|majorPageFaults)$`)

// unordered names the lists whose order means nothing and is not stable: CRI-O's
// Status lists its runtime handlers in map order, different from call to call.
var unordered = map[string]bool{"runtimeHandlers": true}

func (r *recorder) record(call string, resp proto.Message, err error) {
	s := step{Call: call}
	if err != nil {
		st := status.Convert(err)
		s.Code = st.Code().String()
		s.Message = r.scrub(st.Message())
	} else if resp != nil {
		b, merr := protojson.Marshal(resp)
		if merr != nil {
			panic(merr)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			panic(err)
		}
		s.Response = r.normalize(v, "")
	}
	r.steps = append(r.steps, s)
}

func (r *recorder) scrub(s string) string {
	for id, p := range r.ids {
		s = strings.ReplaceAll(s, id, p)
	}
	return s
}

func (r *recorder) normalize(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = r.normalize(x, k)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = r.normalize(x, key)
		}
		if unordered[key] {
			slices.SortFunc(v, func(a, b any) int {
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				return bytes.Compare(ja, jb)
			})
		}
		return v
	case string:
		if volatile.MatchString(key) {
			return "<" + key + ">"
		}
		if key == "id" || strings.HasSuffix(key, "Id") {
			return r.placeholder(v)
		}
		return r.scrub(v)
	default:
		if volatile.MatchString(key) {
			return "<" + key + ">"
		}
		return v
	}
}

// criScript is the scripted sequence of the differential test: the main
// calls of a pod's life, and bad requests whose error codes must match.
func criScript(t *testing.T, rs internalapi.RuntimeService, is internalapi.ImageManagerService, name string) []step {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &recorder{ids: map[string]string{}}

	v, err := rs.Version(ctx, "v1")
	r.record("Version", v, err)
	st, err := rs.Status(ctx, false)
	r.record("Status", st, err)

	podCfg := podConfig(t, name, map[string]string{"diff": name})
	podID, err := rs.RunPodSandbox(ctx, podCfg, "")
	r.record("RunPodSandbox", &runtimeapi.RunPodSandboxResponse{PodSandboxId: podID}, err)
	if err != nil {
		return r.steps
	}
	defer removePod(t, rs, podID)
	ps, err := rs.PodSandboxStatus(ctx, podID, false)
	r.record("PodSandboxStatus", ps, err)
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"diff": name}})
	r.record("ListPodSandbox", &runtimeapi.ListPodSandboxResponse{Items: pods}, err)

	ctrCfg := containerConfig("worker", "echo hello; exec sleep 3600", map[string]string{"diff": name})
	ctrID, err := rs.CreateContainer(ctx, podID, ctrCfg, podCfg)
	r.record("CreateContainer", &runtimeapi.CreateContainerResponse{ContainerId: ctrID}, err)
	r.record("StartContainer", nil, rs.StartContainer(ctx, ctrID))
	cs, err := rs.ContainerStatus(ctx, ctrID, false)
	r.record("ContainerStatus", cs, err)
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
	r.record("ListContainers", &runtimeapi.ListContainersResponse{Containers: ctrs}, err)
	stdout, stderr, err := rs.ExecSync(ctx, ctrID, []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, 10*time.Second)
	r.record("ExecSync", &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr}, err)
	img, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: testbed.BusyboxImage}, false)
	r.record("ImageStatus", img, err)

	// Bad requests.
	_, err = rs.ContainerStatus(ctx, "no-such-container", false)
	r.record("ContainerStatus(unknown)", nil, err)
	r.record("StartContainer(unknown)", nil, rs.StartContainer(ctx, "no-such-container"))
	_, err = rs.PodSandboxStatus(ctx, "no-such-pod", false)
	r.record("PodSandboxStatus(unknown)", nil, err)
	_, err = rs.CreateContainer(ctx, "no-such-pod", ctrCfg, podCfg)
	r.record("CreateContainer(unknown pod)", nil, err)
	bad := containerConfig("bad-image", "true", nil)
	bad.Image = &runtimeapi.ImageSpec{Image: "registry.invalid/no/such:image"}
	_, err = rs.CreateContainer(ctx, podID, bad, podCfg)
	r.record("CreateContainer(bad image)", nil, err)
	_, _, err = rs.ExecSync(ctx, "no-such-container", []string{"true"}, time.Second)
	r.record("ExecSync(unknown)", nil, err)
	img, err = is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "registry.invalid/no/such:image"}, false)
	r.record("ImageStatus(unknown)", img, err)

	r.record("StopContainer", nil, rs.StopContainer(ctx, ctrID, 1))
	cs, err = rs.ContainerStatus(ctx, ctrID, false)
	r.record("ContainerStatus(stopped)", cs, err)
	r.record("RemoveContainer", nil, rs.RemoveContainer(ctx, ctrID))
	r.record("StopPodSandbox", nil, rs.StopPodSandbox(ctx, podID))
	r.record("RemovePodSandbox", nil, rs.RemovePodSandbox(ctx, podID))
	_, err = rs.PodSandboxStatus(ctx, podID, false)
	r.record("PodSandboxStatus(removed)", nil, err)
	return r.steps
}

// TestDifferentialDirectVersusCrishim runs the same script directly against
// containerd and through crishim: responses (less IDs, times and addresses)
// and error codes must be the same.
func TestDifferentialDirectVersusCrishim(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	name := uniqueName("diff")

	rsDirect, isDirect := criClients(t, testbed.Endpoint)
	direct := criScript(t, rsDirect, isDirect, name)
	rsProxied, isProxied := criClients(t, d.Endpoint)
	proxied := criScript(t, rsProxied, isProxied, name)

	if len(direct) != len(proxied) {
		t.Fatalf("direct ran %d steps, crishim %d", len(direct), len(proxied))
	}
	for i := range direct {
		if !reflect.DeepEqual(direct[i], proxied[i]) {
			dj, _ := json.MarshalIndent(direct[i], "", "  ")
			pj, _ := json.MarshalIndent(proxied[i], "", "  ")
			t.Errorf("step %s differs:\ndirect:  %s\ncrishim: %s", direct[i].Call, dj, pj)
		}
	}
	codes := 0
	for _, s := range direct {
		if s.Code != "" {
			codes++
		}
	}
	if codes < 6 {
		t.Errorf("only %d error steps: the bad requests did not fail directly either", codes)
	}
	t.Logf("%d steps identical, %d of them errors", len(direct), codes)
}
