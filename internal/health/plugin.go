package health

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// PluginWithdrawer takes the device plugin of a wedged node out of
// service; nil in Deps turns it off.
type PluginWithdrawer interface {
	// Withdraw deletes the node's device-plugin pods that are serving
	// and returns their names.
	Withdraw(ctx context.Context, node string) ([]string, error)
}

// DevicePlugin withdraws the chart's device plugin from a wedged node by
// deleting its pod there. The vendor device plugin does not read our
// marker, so it would keep advertising the wedged chips until the reboot;
// with autoRecover off that reboot may be hours away, and the scheduler
// would keep placing NPU pods on the node. The DaemonSet's replacement
// waits in its wait-for-driver init container while the driver-ready
// marker is absent, so no plugin registers with the kubelet, which then
// reports huawei.com/Ascend* allocatable 0. Only pods past that gate
// (Initialized) are deleted: a replacement still waiting is exactly what
// is wanted, and deleting it again would only churn.
type DevicePlugin struct {
	Client    kubernetes.Interface
	Namespace string
	Selector  labels.Selector
}

// Withdraw implements PluginWithdrawer. The node-agent policy lets the
// driver pod's service account delete pods on its own node only.
func (d DevicePlugin) Withdraw(ctx context.Context, node string) ([]string, error) {
	list, err := d.Client.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: d.Selector.String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list device-plugin pods (%s) on node %s in namespace %s: %w", d.Selector, node, d.Namespace, err)
	}
	var deleted []string
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil || !kube.PodInitialized(p) {
			continue
		}
		uid := p.UID
		err := d.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			deleted = append(deleted, p.Namespace+"/"+p.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or replaced meanwhile: nothing left to withdraw.
		default:
			errs = append(errs, fmt.Errorf("delete device-plugin pod %s/%s on node %s: %w", p.Namespace, p.Name, node, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// withdrawPlugin deletes the serving device-plugin pods of the wedged node.
func (w *Watcher) withdrawPlugin(ctx context.Context, node *corev1.Node) error {
	if w.plugin == nil {
		return nil
	}
	deleted, err := w.plugin.Withdraw(ctx, w.cfg.NodeName)
	if len(deleted) > 0 {
		msg := fmt.Sprintf("chips wedged: device-plugin pod(s) %s deleted; the replacement waits for the driver-ready marker, so the kubelet withdraws the NPU resources of node %s until the chips recover or the node reboots",
			strings.Join(deleted, ", "), w.cfg.NodeName)
		w.log.WithField("pods", deleted).Warn(msg)
		w.events.Node(node, true, contract.EventDevicePluginWithdrawn, "%s", msg)
	}
	if err != nil {
		return fmt.Errorf("node %s: withdraw the device plugin of the wedged chips: %w; retried at the next probe (the driver pod's service account needs list and delete on pods in its namespace)", w.cfg.NodeName, err)
	}
	return nil
}
