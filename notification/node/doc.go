// Package node is one node's share of the Notification API (v1alpha2): it watches only its
// node's NotificationInbox (by name, a watch the apiserver's watch cache indexes), reads each
// NodeNotification the inbox lists, runs the notifier once in each of their pods through crishim's own Notify, and
// writes each object's status at most twice: Running before the first run, Finished with
// every pod's result. It never reads or writes a Notification: the aggregator
// (notification/aggregator) fans the work out and sums it up. It runs beside the CRI path
// and never on it.
package node
