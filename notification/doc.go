// Package notification serves the Notification API (./v1alpha1) on one node: it watches
// Notifications, runs the named notifier once in each selected pod on this node, and writes
// that node's entries and the shared conditions into the Notification's status with
// server-side apply, so nodes never overwrite each other's entries. It runs beside the CRI
// path and never on it: the watch, the runs and the status writes are its own goroutines.
package notification
