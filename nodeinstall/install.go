package nodeinstall

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// rollbackTimeout bounds a rollback that runs after the caller's context ended (the pod
// stopped mid-install): the node must not be left half switched.
const rollbackTimeout = 3 * time.Minute

// Install puts crishim on the node and points the kubelet at it:
//
//  1. crishim's binaries and units from the payload, unless crishim.service is someone
//     else's (the .deb's: then that crishim is used); crishim (re)started if they changed,
//     under crishim.socket, so a kubelet already pointed at it sees no refused call;
//  2. crishim answers CRI Status on its socket;
//  3. if the kubelet is not pointed at crishim yet: the node tainted, the kubelet's two
//     drop-ins, the kubelet restarted (its containers keep running), the node Ready again
//     as reported by the new kubelet, crishim answering again;
//  4. the node labelled, the taint removed.
//
// Any failed check rolls back every file written (the kubelet back on its previous
// endpoint, the previous crishim or none) and restarts what was restarted.
func (in *Installer) Install(ctx context.Context) error {
	log := in.logger()
	own, where, err := in.ownership(ctx)
	if err != nil {
		return err
	}
	var j journal
	if own == Foreign {
		log.Info("crishim.service is not the installer's: using that crishim as it is", "unit", where)
	} else {
		for _, f := range crishimFiles {
			b, err := in.payload(f)
			if err != nil {
				return err
			}
			if err := in.writeFile(&j, f.dst, b, f.mode); err != nil {
				return in.rollback(ctx, j, err)
			}
		}
	}
	if j.touches(crishimPaths()...) {
		log.Info("crishim's files changed: (re)starting crishim under crishim.socket", "files", len(j))
		if err := in.startCrishim(ctx, true); err != nil {
			return in.rollback(ctx, j, err)
		}
	} else if err := in.startCrishim(ctx, false); err != nil {
		return in.rollback(ctx, j, err)
	}
	if err := in.waitCRI(ctx); err != nil {
		return in.rollback(ctx, j, err)
	}
	pointed, err := in.kubeletPointed()
	if err != nil {
		return in.rollback(ctx, j, err)
	}
	labelled, err := in.Cluster.Labelled(ctx)
	if err != nil {
		return in.rollback(ctx, j, err)
	}
	if pointed && labelled {
		log.Info("the kubelet talks to crishim already; crishim answers")
		return nil
	}
	if err := in.Cluster.SetTaint(ctx, true); err != nil {
		return in.rollback(ctx, j, err)
	}
	for _, f := range kubeletFiles {
		b, err := in.payload(f)
		if err != nil {
			return in.rollback(ctx, j, err)
		}
		if err := in.writeFile(&j, f.dst, b, f.mode); err != nil {
			return in.rollback(ctx, j, err)
		}
	}
	if j.touches(kubeletPaths()...) {
		log.Info("pointing the kubelet at crishim: restarting it")
		if err := in.Systemd.Reload(ctx); err != nil {
			return in.rollback(ctx, j, err)
		}
		if err := in.restartKubelet(ctx); err != nil {
			return in.rollback(ctx, j, fmt.Errorf("the kubelet on crishim: %w", err))
		}
	} else if err := in.waitReady(ctx, time.Time{}); err != nil {
		return in.rollback(ctx, j, err)
	}
	if err := in.waitCRI(ctx); err != nil {
		return in.rollback(ctx, j, err)
	}
	if err := in.Cluster.SetLabel(ctx, true); err != nil {
		return in.rollback(ctx, j, err)
	}
	if err := in.Cluster.SetTaint(ctx, false); err != nil {
		return err
	}
	log.Info("crishim installed: the kubelet talks to crishim, the node is Ready")
	return nil
}

func crishimPaths() []string {
	var p []string
	for _, f := range crishimFiles {
		p = append(p, f.dst)
	}
	return p
}

func kubeletPaths() []string {
	var p []string
	for _, f := range kubeletFiles {
		p = append(p, f.dst)
	}
	return p
}

// startCrishim enables and starts crishim.socket and crishim.service; changed restarts
// crishim.service (new files) while the socket stays listening.
func (in *Installer) startCrishim(ctx context.Context, changed bool) error {
	if changed {
		if err := in.Systemd.Reload(ctx); err != nil {
			return err
		}
		if err := in.Systemd.Enable(ctx, socketUnit, crishimUnit); err != nil {
			return err
		}
	}
	if err := in.Systemd.Start(ctx, socketUnit); err != nil {
		return err
	}
	if changed {
		return in.Systemd.Restart(ctx, crishimUnit)
	}
	return in.Systemd.Start(ctx, crishimUnit)
}

// rollbackPlan is what a rollback must restart once the journaled files are back.
type rollbackPlan struct {
	// restartCrishim: crishim's files were replaced (an upgrade): the previous crishim is
	// started again.
	restartCrishim bool
	// removeCrishim: crishim's files were new: crishim is stopped and disabled (its files
	// are already gone).
	removeCrishim bool
	// restartKubelet: its drop-ins changed: it is restarted on its previous endpoint and
	// the node must be Ready again.
	restartKubelet bool
}

func planRollback(j journal) rollbackPlan {
	var p rollbackPlan
	for _, c := range j {
		switch c.path {
		case CrishimBin, CrishimService, CrishimSocket:
			if c.existed {
				p.restartCrishim = true
			} else if c.path == CrishimService {
				p.removeCrishim = true
			}
		case KubeletUnitDropIn, KubeletConfDropIn:
			p.restartKubelet = true
		}
	}
	if p.removeCrishim {
		p.restartCrishim = false
	}
	return p
}

// rollback undoes the journal after cause: files back, systemd reloaded, crishim restarted
// or removed, the kubelet restarted on its previous endpoint and the node Ready, the taint
// off (the node is as it was).
func (in *Installer) rollback(ctx context.Context, j journal, cause error) error {
	log := in.logger()
	log.Error("install failed: rolling back", "err", cause, "files", len(j))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	p := planRollback(j)
	errs := []error{in.undo(j)}
	if len(j) > 0 {
		errs = append(errs, in.Systemd.Reload(ctx))
	}
	switch {
	case p.removeCrishim:
		errs = append(errs, in.Systemd.Stop(ctx, socketUnit), in.Systemd.Stop(ctx, crishimUnit), in.Systemd.Disable(ctx, socketUnit, crishimUnit))
	case p.restartCrishim:
		errs = append(errs, in.Systemd.Restart(ctx, crishimUnit))
	}
	if p.restartKubelet {
		errs = append(errs, in.restartKubelet(ctx))
	}
	errs = append(errs, in.Cluster.SetTaint(ctx, false))
	err := rollbackError(cause, errors.Join(errs...))
	log.Error("rolled back", "err", err)
	return err
}
