package v1alpha2

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// NotifierAnnotationPrefix is how pod owners declare notifiers (shim.NotifierAnnotationPrefix;
// repeated here so the API does not import the CRI service layer).
const NotifierAnnotationPrefix = "notifier.crishim.io/"

// DeclaringContainers names, sorted, the containers whose pod annotations declare notifier:
// notifier.crishim.io/<container>.<notifier>. Container names are DNS labels, so the first
// dot splits.
func DeclaringContainers(annotations map[string]string, notifier string) []string {
	var out []string
	for k := range annotations {
		rest, ok := strings.CutPrefix(k, NotifierAnnotationPrefix)
		if ctr, name, found := strings.Cut(rest, "."); ok && found && name == notifier {
			out = append(out, ctr)
		}
	}
	sort.Strings(out)
	return out
}

// Bound cuts s to at most n bytes, on a rune boundary, marking a cut with "…": every message
// crishim writes into an object goes through it, so no object grows with what a notifier
// prints.
func Bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// NodeNotificationName is the name of shard shard of node's share of the Notification
// (name, uid): the same every time it is computed, so a new aggregator leader that creates
// it again finds it there (AlreadyExists) instead of making a second. The hash keeps it
// unique and short; node names may be 253 bytes.
func NodeNotificationName(name, uid, node string, shard int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", uid, node, shard)))
	prefix := name
	if len(prefix) > 200 {
		prefix = strings.TrimRight(prefix[:200], ".-")
	}
	return prefix + "-" + hex.EncodeToString(sum[:5])
}

// Counts sums a NodeNotification into selected, started, succeeded and failed pods: a pod
// is started once its node recorded the start and not failed before running, succeeded or
// failed once its result is recorded. Only Finished and Expired objects have results.
func (n *NodeNotification) Counts() (selected, started, succeeded, failed int32) {
	selected = int32(len(n.Spec.Pods))
	for _, p := range n.Status.Pods {
		switch p.State {
		case PodRunning:
			started++
		case PodSucceeded:
			started++
			succeeded++
		case PodFailed:
			failed++
			switch p.Reason {
			case ReasonNodeDidNotAnswer, ReasonPodNotFound, ReasonNotifierMissing, ReasonRunFailed:
			default: // ran, or was running when its result was lost
				started++
			}
		}
	}
	return selected, started, succeeded, failed
}
