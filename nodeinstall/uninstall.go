package nodeinstall

import (
	"context"
	"errors"
)

// Uninstall points the kubelet back at its own endpoint (the runtime's, in its config.yaml)
// and takes the installer's crishim off the node:
//
//  1. the label removed, the node tainted;
//  2. the kubelet's two drop-ins removed, the kubelet restarted (its containers keep
//     running), the node Ready again as reported by the new kubelet;
//  3. if crishim is the installer's: crishim.socket and crishim.service stopped and
//     disabled, their files and the binaries removed; a crishim of the package or an
//     operator is left as it is;
//  4. the taint removed.
//
// If the kubelet is not Ready again without crishim, the drop-ins are put back, the kubelet
// restarted on crishim and the label restored.
func (in *Installer) Uninstall(ctx context.Context) error {
	log := in.logger()
	own, where, err := in.ownership(ctx)
	if err != nil {
		return err
	}
	labelled, err := in.Cluster.Labelled(ctx)
	if err != nil {
		return err
	}
	if err := in.Cluster.SetLabel(ctx, false); err != nil {
		return err
	}
	if err := in.Cluster.SetTaint(ctx, true); err != nil {
		return err
	}
	var j journal
	for _, f := range kubeletFiles {
		if err := in.removeFile(&j, f.dst); err != nil {
			return in.rollbackUninstall(ctx, j, labelled, err)
		}
	}
	if len(j) > 0 {
		log.Info("pointing the kubelet back at its runtime: restarting it")
		if err := in.Systemd.Reload(ctx); err != nil {
			return in.rollbackUninstall(ctx, j, labelled, err)
		}
		if err := in.restartKubelet(ctx); err != nil {
			return in.rollbackUninstall(ctx, j, labelled, err)
		}
	}
	switch own {
	case Ours:
		log.Info("removing the installer's crishim")
		var errs []error
		// The socket first: stopped after crishim, it would start crishim again for the
		// next connection.
		errs = append(errs, in.Systemd.Stop(ctx, socketUnit), in.Systemd.Stop(ctx, crishimUnit), in.Systemd.Disable(ctx, socketUnit, crishimUnit))
		var removed journal
		for _, f := range crishimFiles {
			errs = append(errs, in.removeFile(&removed, f.dst))
		}
		errs = append(errs, in.Systemd.Reload(ctx))
		if err := errors.Join(errs...); err != nil {
			return err
		}
	case Foreign:
		log.Info("crishim.service is not the installer's: left as it is", "unit", where)
	}
	if err := in.Cluster.SetTaint(ctx, false); err != nil {
		return err
	}
	log.Info("crishim uninstalled: the kubelet talks to its runtime, the node is Ready")
	return nil
}

func (in *Installer) rollbackUninstall(ctx context.Context, j journal, labelled bool, cause error) error {
	log := in.logger()
	log.Error("uninstall failed: rolling back", "err", cause)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	errs := []error{in.undo(j)}
	if len(j) > 0 {
		errs = append(errs, in.Systemd.Reload(ctx), in.restartKubelet(ctx))
	}
	if labelled {
		errs = append(errs, in.Cluster.SetLabel(ctx, true))
	}
	errs = append(errs, in.Cluster.SetTaint(ctx, false))
	return rollbackError(cause, errors.Join(errs...))
}
