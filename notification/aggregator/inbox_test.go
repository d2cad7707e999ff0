package aggregator

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/crishim/crishim/notification/v1alpha2"
)

func (f *fixture) inbox(node string) *v1alpha2.NotificationInbox {
	f.t.Helper()
	u, err := f.dyn.Resource(v1alpha2.InboxResource).Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var in v1alpha2.NotificationInbox
	if err := decode(u, &in); err != nil {
		f.t.Fatal(err)
	}
	return &in
}

func (f *fixture) reconcileInbox(node string) {
	f.t.Helper()
	f.sync()
	if err := f.c.reconcileInbox(context.Background(), node); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) inboxWrites() int {
	n := 0
	for _, a := range f.dyn.Actions() {
		if a.GetResource() == v1alpha2.InboxResource && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

// TestInboxListsTheNodesShares: after the fan-out each node's inbox lists its own shares,
// owned by its Node when there is one; listing them again writes nothing; a finished share
// leaves only with the next write, which a new share brings.
func TestInboxListsTheNodesShares(t *testing.T) {
	old := created.Add(-time.Hour)
	f := newFixture(t, notification(), pod("a1", "node-a", true, old), pod("b1", "node-b", true, old))
	if _, err := f.c.o.Kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	byNode := map[string]*v1alpha2.NodeNotification{}
	for _, s := range f.shares() {
		byNode[s.Spec.NodeName] = s
	}
	for _, node := range []string{"node-a", "node-b"} {
		f.reconcileInbox(node)
		in := f.inbox(node)
		s := byNode[node]
		if len(in.Spec.Shares) != 1 || in.Spec.Shares[0] != (v1alpha2.ShareRef{Namespace: "default", Name: s.Name, UID: string(s.UID)}) {
			t.Errorf("inbox of %s lists %+v, want its share %s", node, in.Spec.Shares, s.Name)
		}
	}
	if o := f.inbox("node-a").OwnerReferences; len(o) != 1 || o[0].UID != "node-a-uid" || o[0].Kind != "Node" {
		t.Errorf("inbox of node-a owners %+v, want its Node", o)
	}
	if o := f.inbox("node-b").OwnerReferences; len(o) != 0 {
		t.Errorf("inbox of node-b (no Node object) owners %+v, want none", o)
	}
	writes := f.inboxWrites()
	f.finish(byNode["node-a"], v1alpha2.PodSucceeded, "")
	f.reconcileInbox("node-a") // a new leader's first look: everything wanted is listed
	if f.inboxWrites() != writes {
		t.Errorf("%d inbox writes with nothing missing", f.inboxWrites()-writes)
	}
	if len(f.inbox("node-a").Spec.Shares) != 1 {
		t.Error("a finished share was removed by a write of its own")
	}
	next := share(t, f, "next", "node-a")
	f.reconcileInbox("node-a")
	if in := f.inbox("node-a"); len(in.Spec.Shares) != 1 || in.Spec.Shares[0].Name != next {
		t.Errorf("inbox of node-a lists %+v, want only the new share %s", in.Spec.Shares, next)
	}
}

// TestInboxIsBounded: a node with more unfinished shares than an inbox lists gets the
// oldest; a finished one makes room for the next.
func TestInboxIsBounded(t *testing.T) {
	f := newFixture(t, notification())
	var names []string
	for i := range v1alpha2.MaxInboxShares + 2 {
		f.now = f.now.Add(time.Second)
		names = append(names, share(t, f, fmt.Sprintf("s%03d", i), "node-a"))
	}
	f.reconcileInbox("node-a")
	in := f.inbox("node-a")
	if len(in.Spec.Shares) != v1alpha2.MaxInboxShares || in.Spec.Shares[0].Name != names[0] {
		t.Fatalf("inbox lists %d shares from %s, want %d from %s", len(in.Spec.Shares), in.Spec.Shares[0].Name, v1alpha2.MaxInboxShares, names[0])
	}
	f.sync()
	if !f.c.inboxFull("node-a") {
		t.Error("a full inbox not reported full: a finished share would not make room")
	}
	first := f.shares()[0]
	for _, s := range f.shares() {
		if s.Name == names[0] {
			first = s
		}
	}
	f.finish(first, v1alpha2.PodSucceeded, "")
	f.reconcileInbox("node-a")
	in = f.inbox("node-a")
	if len(in.Spec.Shares) != v1alpha2.MaxInboxShares || in.Spec.Shares[0].Name != names[1] || in.Spec.Shares[len(in.Spec.Shares)-1].Name != names[v1alpha2.MaxInboxShares] {
		t.Errorf("after one finished: %d shares, %s..%s", len(in.Spec.Shares), in.Spec.Shares[0].Name, in.Spec.Shares[len(in.Spec.Shares)-1].Name)
	}
}

// share creates a NodeNotification of the Notification q for node, as the fan-out would.
func share(t *testing.T, f *fixture, name, node string) string {
	t.Helper()
	nn := &v1alpha2.NodeNotification{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.NodeKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name), Labels: map[string]string{v1alpha2.LabelNotificationUID: "q-uid"}},
		Spec:       v1alpha2.NodeNotificationSpec{NodeName: node, NotificationName: "q", NotificationUID: "q-uid", ContainerNotifierName: "quiesce", Pods: []v1alpha2.PodRef{{Name: "p-" + name, UID: "uid-p-" + name}}},
	}
	if _, err := f.dyn.Resource(v1alpha2.NodeResource).Namespace("default").Create(context.Background(), mustUnstructured(t, nn), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}
