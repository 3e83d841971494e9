package uninstall

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

// deleteRecords deletes the release's rollout records (the ConfigMaps
// `npu-hooks timeline` draws from): the rollout writes them, not Helm, so
// helm uninstall leaves them. Run after stopRollout, when no rollout is
// left to write one again.
func (u *run) deleteRecords(ctx context.Context) error {
	ns := u.cfg.Namespace
	cms := u.cfg.Client.CoreV1().ConfigMaps(ns)
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: u.selector(selection.Equals, rolloutrecord.Component)})
	if err != nil {
		return fmt.Errorf("list the rollout records (ConfigMaps) of release %s in %s: %w", u.cfg.Release, ns, err)
	}
	for _, c := range list.Items {
		if err := u.act(ctx, "delete", "deleted", u.ref("ConfigMap", c.Name)+" (rollout record)", func(ctx context.Context) error {
			return ignoreNotFound(cms.Delete(ctx, c.Name, metav1.DeleteOptions{}), "delete ConfigMap "+ns+"/"+c.Name)
		}); err != nil {
			return err
		}
	}
	return nil
}
