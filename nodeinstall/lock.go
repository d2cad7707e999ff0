package nodeinstall

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock is the coordination.k8s.io Lease the installer pods take in turn, so one node at a
// time has its kubelet switched: a failure stops the rollout at one node.
type Lock struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	Identity  string // the node's name
	Log       *slog.Logger
}

// Do waits for the Lease, runs work holding it and releases it. work runs under ctx, not
// under the Lease: a Lease lost mid-way (the API server away longer than its duration) does
// not cut an installation short, which would leave the node half switched.
func (l Lock) Do(ctx context.Context, work func(context.Context) error) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var result error
	started, done := make(chan struct{}), make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name},
			Client:     l.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: l.Identity},
		},
		LeaseDuration:   30 * time.Second,
		RenewDeadline:   20 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            l.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				if ctx.Err() != nil {
					return // stopped while the Lease was being taken: no work begun
				}
				close(started)
				defer close(done)
				defer cancel() // releases the Lease
				l.Log.Info("holding the installers' Lease", "lease", l.Namespace+"/"+l.Name)
				result = work(ctx)
			},
			OnStoppedLeading: func() {
				select {
				case <-done:
				default:
					l.Log.Warn("lost the installers' Lease while working", "lease", l.Namespace+"/"+l.Name)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	l.Log.Info("waiting for the installers' Lease", "lease", l.Namespace+"/"+l.Name)
	le.Run(lctx)
	select {
	case <-started:
		<-done
		return result
	default:
		return ctx.Err()
	}
}
