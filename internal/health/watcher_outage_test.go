package health

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/kube/kubetest"
)

// unreachableNodes is a real client of an API server address nobody
// listens on: every call fails as on a node cut off from the control plane.
func unreachableNodes(t *testing.T) kube.NodeClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return kube.Nodes{Client: c}
}

// refusingNodes reads the Node but is refused every write, like a
// health-watch whose RBAC lost the patch permission.
type refusingNodes struct{ *kubetest.Nodes }

func (r refusingNodes) Patch(ctx context.Context, name string, c kube.NodeChange) (*corev1.Node, error) {
	return r.PatchIf(ctx, name, "", c)
}

func (refusingNodes) PatchIf(_ context.Context, name, _ string, _ kube.NodeChange) (*corev1.Node, error) {
	return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, name, nil)
}

// A wedge on a node cut off from the API server: failures go on counting,
// and at the threshold the marker goes although no API call succeeds;
// the Node is told once the API server answers again.
func TestWatcherRemovesTheMarkerWhileTheAPIServerIsUnreachable(t *testing.T) {
	r := newRig(t, 3, nil, nil)
	_ = r.markers.SetReady("25.3.0")
	r.step(t)
	r.w.nodes = unreachableNodes(t)
	_ = r.host.Wedge(1)
	for i := 1; i <= 3; i++ {
		start := time.Now()
		err := r.w.Step(context.Background())
		if present := r.markerPresent(); present != (i < 3) {
			t.Fatalf("after %d failed probes without API server: marker present %v (step: %v)", i, present, err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("probe %d took %s", i, took)
		}
		if err == nil {
			t.Fatalf("probe %d with the API server away: no error", i)
		}
		if i == 3 && (!strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "may get and patch nodes")) {
			t.Fatalf("error names neither the node nor the fix: %v", err)
		}
	}
	if w, _ := r.markers.Wedged(); !w {
		t.Fatal("marker removed without recording the wedge: a healed chip could not restore it")
	}
	if evs := r.rec.take(); len(evs) != 0 {
		t.Fatalf("events emitted without an API server: %+v", evs)
	}

	r.w.nodes = r.nodes
	r.step(t)
	n := r.node(t)
	if n.Labels[r.keys.RebootRequired()] != "true" || n.Annotations[r.keys.RebootReason()] != "recovery" || n.Labels[r.keys.DriverReady()] != "false" {
		t.Fatalf("API server back: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if evs := r.rec.take(); eventReasons(evs) != "ChipWedged,RebootRequired" {
		t.Fatalf("events %+v", evs)
	}
}

// The patch is refused (RBAC): the marker goes all the same, and the
// Node is patched at a later probe once the write is allowed again.
func TestWatcherRemovesTheMarkerWhenTheNodePatchIsRefused(t *testing.T) {
	r := newRig(t, 1, nil, nil)
	_ = r.markers.SetReady("25.3.0")
	r.step(t)
	r.w.nodes = refusingNodes{r.nodes}
	_ = r.host.Wedge(0)
	err := r.w.Step(context.Background())
	if r.markerPresent() {
		t.Fatalf("marker left on wedged chips because the Node patch was refused (step: %v)", err)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node n1") {
		t.Fatalf("refused patch: err %v", err)
	}
	if n := r.node(t); n.Labels[r.keys.RebootRequired()] != "" || n.Labels[r.keys.DriverReady()] != "true" {
		t.Fatalf("refused patch changed the Node: %v", n.Labels)
	}
	r.w.nodes = r.nodes
	r.step(t)
	if n := r.node(t); n.Labels[r.keys.RebootRequired()] != "true" || n.Labels[r.keys.DriverReady()] != "false" {
		t.Fatalf("patch allowed again: %v", n.Labels)
	}
}

// npu-smi stuck in uninterruptible sleep (deaf to cancellation): each
// probe fails at its timeout, the loop goes on, and the wedge is reported
// after the threshold.
func TestRunReportsAWedgeWhileNPUSMIIsStuck(t *testing.T) {
	const timeout = 10 * time.Second
	r := newRig(t, 3, nil, nil)
	cfg := r.w.cfg
	cfg.Timeout = timeout
	r.w = NewWatcher(cfg, Deps{Nodes: r.nodes, Host: r.host, Clock: r.clock, Events: r.rec, Log: r.w.log})
	_ = r.markers.SetReady("25.3.0")
	r.step(t)
	if err := r.host.SetSMI(simhost.SMIStuck, "", 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- r.w.Run(ctx) }()
	defer func() {
		// Free the stuck npu-smi first, or a watch that waits for it
		// (the bug) would never end.
		_ = r.host.SetSMI(simhost.SMINormal, "", 0)
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for {
		n := r.node(t)
		r.rec.mu.Lock()
		reported := len(r.rec.events) >= 2
		r.rec.mu.Unlock()
		// Events follow the Node patch.
		if reported && n.Labels[r.keys.RebootRequired()] == "true" && !r.markerPresent() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("wedge not reported while npu-smi is stuck: labels %v, marker %v", n.Labels, r.markerPresent())
		}
		if r.clock.HasWaiters() {
			r.clock.Step(timeout)
		}
		runtime.Gosched()
	}
	evs := r.rec.take()
	if eventReasons(evs) != "ChipWedged,RebootRequired" || !strings.Contains(evs[0].message, "still hung") {
		t.Fatalf("events %+v; want the wedge with the hung npu-smi as its last reason", evs)
	}
}
