// Package aggregator is the Notification API's one cluster-wide controller (v1alpha2): for
// each Notification it selects the pods (from a pod informer), gives each node with
// selected pods its share as NodeNotifications (owned by the Notification), expires the
// shares of nodes that do not answer, and sums the shares' results into the Notification's
// counts, first failures and conditions, in batched writes. Only one replica acts at a time
// (cmd/crishim-notification-controller elects a leader on a Lease); everything it decides
// is written down (the shares, their statuses, the parent's status), so the next leader
// continues from the objects alone.
package aggregator
