package driverentry

import (
	"context"
	"errors"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/dstarget"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// PodStopper deletes the pods of ours that hold the chips on a node.
type PodStopper interface {
	// Stop deletes the node's running pods of the stop targets and
	// returns their names, and the targets that name no DaemonSet.
	Stop(ctx context.Context, node string) (stopped, missing []string, err error)
}

// DaemonSetPods stops the pods that the Targets' DaemonSets run on a node
// (the chart's device plugin and exporter, the re-roll targets) by
// deleting them, never by editing a DaemonSet: no drift under GitOps. The
// DaemonSet controller re-creates them at once; the chart's replacements
// wait in their wait-for-driver init container, which opens no chip,
// until the driver is ready after the reboot. Only pods past their init
// containers are deleted: one still waiting holds nothing, and deleting it
// again would only churn. The node-agent policy lets the driver pod's
// service account delete pods on its own node only.
type DaemonSetPods struct {
	Client  kubernetes.Interface
	Targets []dstarget.Spec
}

// Stop implements PodStopper.
func (s DaemonSetPods) Stop(ctx context.Context, node string) (stopped, missing []string, err error) {
	var errs []error
	for _, t := range s.Targets {
		sets, err := s.daemonSets(ctx, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(sets) == 0 {
			missing = append(missing, t.String())
			continue
		}
		for _, ds := range sets {
			names, err := s.stopPods(ctx, ds, node)
			stopped = append(stopped, names...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	sort.Strings(stopped)
	return stopped, missing, errors.Join(errs...)
}

func (s DaemonSetPods) daemonSets(ctx context.Context, t dstarget.Spec) ([]*appsv1.DaemonSet, error) {
	if t.Name != "" {
		ds, err := s.Client.AppsV1().DaemonSets(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get DaemonSet %s/%s: %w", t.Namespace, t.Name, err)
		}
		return []*appsv1.DaemonSet{ds}, nil
	}
	list, err := s.Client.AppsV1().DaemonSets(t.Namespace).List(ctx, metav1.ListOptions{LabelSelector: t.Selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list DaemonSets %s in namespace %s: %w", t.Selector, t.Namespace, err)
	}
	out := make([]*appsv1.DaemonSet, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func (s DaemonSetPods) stopPods(ctx context.Context, ds *appsv1.DaemonSet, node string) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("DaemonSet %s/%s: its selector: %w", ds.Namespace, ds.Name, err)
	}
	list, err := s.Client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: sel.String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods of DaemonSet %s/%s on node %s: %w", ds.Namespace, ds.Name, node, err)
	}
	var stopped []string
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != ds.UID || p.DeletionTimestamp != nil || !kube.PodInitialized(p) {
			continue
		}
		uid := p.UID
		err := s.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			stopped = append(stopped, p.Namespace+"/"+p.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or replaced meanwhile.
		default:
			errs = append(errs, fmt.Errorf("delete pod %s/%s on node %s: %w", p.Namespace, p.Name, node, err))
		}
	}
	return stopped, errors.Join(errs...)
}
