package uninstall

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// driverPodLabel marks the driver DaemonSets and their pods (app=
// npu-driver-daemonset, the vendor's name, kept for its users' commands).
const driverPodLabel = "app"

const driverPodValue = "npu-driver-daemonset"

// HostFilesMessage is the driver pod's HostFilesRemoved Event message
// for request; the command finds its Events by it.
func HostFilesMessage(request, detail string) string { return "request " + request + ": " + detail }

// stopAgents stops the node agents: it marks the driver DaemonSets with
// the request (their pods then remove npu-stack's host files as they
// stop), deletes every DaemonSet of the release and waits for their
// pods, so that no agent writes a node key after the nodes are cleaned.
// After helm uninstall the DaemonSets are gone: only their pods still
// stopping are waited for, and the host files stay.
func (u *run) stopAgents(ctx context.Context) error {
	ns := u.cfg.Namespace
	dsClient := u.cfg.Client.AppsV1().DaemonSets(ns)
	dss, err := dsClient.List(ctx, metav1.ListOptions{LabelSelector: u.selector(selection.Equals)})
	if err != nil {
		return fmt.Errorf("list the DaemonSets of release %s in %s: %w", u.cfg.Release, ns, err)
	}
	agents := u.selector(selection.NotIn, append([]string{ComponentUninstall}, hookComponents()...)...)
	list, err := u.cfg.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: agents})
	if err != nil {
		return fmt.Errorf("list the node agents' pods of release %s in %s: %w", u.cfg.Release, ns, err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !daemonSetPod(&p) })
	if len(dss.Items) == 0 {
		u.report.NoAgents = true
		u.printf("node agents: the DaemonSets of release %s are gone, so no driver pod is left to remove npu-stack's files from the hosts: unless the pre-delete hook (uninstall.cleanup) removed them, they stay (docs/uninstall.md, step 3, lists them)", u.cfg.Release)
		if len(pods) == 0 {
			return nil
		}
	}
	request := u.cfg.Request
	for _, ds := range dss.Items {
		if r := ds.Annotations[u.cfg.Keys.UninstallRequested()]; r != "" && ds.Labels[driverPodLabel] == driverPodValue {
			// A run that stopped half-way: its request stands, and the
			// pods that stopped since reported under it.
			request = r
		}
	}
	for _, ds := range dss.Items {
		if err := u.stopDaemonSet(ctx, ds, request); err != nil {
			return err
		}
	}
	if u.cfg.DryRun {
		return nil
	}
	notReady, err := u.waitPods(ctx, "the node agents' pods", agents, pods, daemonSetPod)
	if err != nil {
		return err
	}
	expect := map[string]bool{}
	for _, p := range pods {
		if p.Labels[driverPodLabel] == driverPodValue && !u.report.NoAgents && p.Spec.NodeName != "" && !notReady[p.Spec.NodeName] {
			expect[p.Spec.NodeName] = true
		}
	}
	if len(expect) > 0 {
		return u.confirmHostFiles(ctx, request, expect)
	}
	return nil
}

// stopDaemonSet marks a driver DaemonSet with the request and deletes
// ds in the foreground.
func (u *run) stopDaemonSet(ctx context.Context, ds appsv1.DaemonSet, request string) error {
	ns, key := u.cfg.Namespace, u.cfg.Keys.UninstallRequested()
	dsClient := u.cfg.Client.AppsV1().DaemonSets(ns)
	if ds.Labels[driverPodLabel] == driverPodValue && ds.Annotations[key] != request {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: request}}})
		if err != nil {
			return fmt.Errorf("encode the request: %w", err)
		}
		what := u.ref("DaemonSet", ds.Name) + " with " + key + "=" + request + " (its pods remove npu-stack's files from their hosts as they stop)"
		if err := u.act(ctx, "mark", "marked", what, func(ctx context.Context) error {
			_, err := dsClient.Patch(ctx, ds.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return ignoreNotFound(err, "mark DaemonSet "+ns+"/"+ds.Name+" for the host cleanup")
		}); err != nil {
			return err
		}
	}
	if ds.DeletionTimestamp != nil {
		return nil
	}
	return u.act(ctx, "delete", "deleted", u.ref("DaemonSet", ds.Name), func(ctx context.Context) error {
		return ignoreNotFound(dsClient.Delete(ctx, ds.Name, propagation(metav1.DeletePropagationForeground)), "delete DaemonSet "+ns+"/"+ds.Name)
	})
}

// daemonSetPod: a pod of a DaemonSet, a node agent. The release's other
// pods (the fleet exporter's Deployment) write nothing on a node; they
// go when Helm deletes their owner, after the pre-delete hook, so the
// hook must not wait for them.
func daemonSetPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet"
}

// waitPods waits until the pods selector selects (pods, as listed;
// what names them), and only (nil: every pod), are gone, except those on
// a node that is not Ready: no kubelet stops them there, so they are
// named with the fix instead. It returns those nodes.
func (u *run) waitPods(ctx context.Context, what, selector string, pods []corev1.Pod, only func(*corev1.Pod) bool) (map[string]bool, error) {
	if len(pods) == 0 {
		return nil, nil
	}
	notReady, err := u.notReadyNodes(ctx)
	if err != nil {
		return nil, err
	}
	note := ""
	for _, p := range pods {
		if p.Labels[driverPodLabel] == driverPodValue {
			note = "; a driver pod installing a driver finishes that first"
		}
		if notReady[p.Spec.NodeName] {
			u.printf("pod %s/%s is on node %s, which is not Ready: it cannot stop there, so it is not waited for (what it wrote on that host stays); once the node is known to be down: kubectl delete pod -n %s %s --force --grace-period=0",
				u.cfg.Namespace, p.Name, p.Spec.NodeName, u.cfg.Namespace, p.Name)
		}
	}
	u.printf("waiting for %s to stop (%d pods%s)", what, len(pods), note)
	onReadyNode := func(o runtime.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && !notReady[p.Spec.NodeName] && (only == nil || only(p))
	}
	return notReady, waitGone(ctx, what, u.podsLW(selector), &corev1.Pod{}, onReadyNode)
}

func (u *run) notReadyNodes(ctx context.Context) (map[string]bool, error) {
	nodes, err := u.cfg.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := map[string]bool{}
	for i := range nodes.Items {
		if !kube.NodeReady(&nodes.Items[i]) {
			out[nodes.Items[i].Name] = true
		}
	}
	return out, nil
}

// confirmHostFiles reads the driver pods' HostFilesRemoved Events of
// request: each node in expect either reported its files removed or is
// named with what stays there.
func (u *run) confirmHostFiles(ctx context.Context, request string, expect map[string]bool) error {
	evs, err := u.cfg.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"reason": string(contract.EventHostFilesRemoved), "involvedObject.kind": "Node"}.String(),
	})
	if err != nil {
		return fmt.Errorf("list the HostFilesRemoved events: %w", err)
	}
	reported := map[string]corev1.Event{}
	for _, e := range evs.Items {
		if strings.HasPrefix(e.Message, HostFilesMessage(request, "")) {
			reported[e.InvolvedObject.Name] = e
		}
	}
	for _, n := range slices.Sorted(maps.Keys(expect)) {
		e, ok := reported[n]
		switch {
		case !ok:
			u.report.HostFilesLeft = append(u.report.HostFilesLeft, n)
			u.printf("node %s: its driver pod did not report removing npu-stack's host files (killed before it could?): they stay there", n)
		case e.Type == corev1.EventTypeWarning:
			u.report.HostFilesLeft = append(u.report.HostFilesLeft, n)
			u.printf("node %s: %s", n, strings.TrimPrefix(e.Message, HostFilesMessage(request, "")))
		default:
			u.report.HostFilesRemoved = append(u.report.HostFilesRemoved, n)
			u.printf("node %s: %s", n, strings.TrimPrefix(e.Message, HostFilesMessage(request, "")))
		}
	}
	return nil
}
