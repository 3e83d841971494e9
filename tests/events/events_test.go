// Package events_test checks the Event recorder every binary uses against
// the real API server.
package events_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

// source names the Events one run of a test writes: the control plane
// lives as long as the test binary, so each run (go test -count=N) reads
// only its own Events, and they are deleted when it ends.
func source(t *testing.T) string {
	t.Helper()
	src := fmt.Sprintf("events-test-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := env.Client.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "source=" + src})
		if err != nil {
			t.Errorf("delete the events of %s: %v", src, err)
		}
	})
	return src
}

// listEvents lists the Events recorded as src.
func listEvents(t *testing.T, src string) []corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "source=" + src})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// A rollout's first decision records an Event per node at once; client-go's
// broadcaster dropped everything past 1,000 queued and abandoned the queue
// at shutdown. Every Event recorded before Shutdown must be written by the
// time it returns, and repeats must still fold into a count.
func TestEveryEventWrittenByShutdown(t *testing.T) {
	const nodes, perNode = 1500, 2
	src := source(t)
	rec := kube.NewRecorder(env.Client, src)
	for i := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ev-node-%04d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		for j := range perNode {
			rec.Node(n, j == 1, contract.EventNPUDriverUpgrade, "step %d of node %d", j, i)
		}
	}
	repeat := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ev-repeat", UID: "uid-repeat"}}
	for range 3 {
		rec.Node(repeat, false, contract.EventRebootPending, "waiting for approval")
	}
	rec.Shutdown()

	written, warnings, repeats := 0, 0, int32(0)
	for _, e := range listEvents(t, src) {
		switch e.InvolvedObject.Name {
		case "ev-repeat":
			repeats += e.Count
			if e.Count != 3 {
				t.Errorf("repeated event has count %d in one object, want 3 (correlation lost?)", e.Count)
			}
		default:
			written++
			if e.Type == corev1.EventTypeWarning {
				warnings++
			}
		}
	}
	if written != nodes*perNode || warnings != nodes || repeats != 3 {
		t.Fatalf("after Shutdown: %d events written (%d warnings), repeats counted %d; want %d (%d warnings), 3",
			written, warnings, repeats, nodes*perNode, nodes)
	}
}

// Repeats of one Event recorded from many goroutines at once fold into one
// Event whose count is the number recorded, whatever the number of the
// recorder's writers: a repeat written before its first copy existed was
// lost (its patch found nothing, its create collided with the first).
func TestConcurrentRepeatsCounted(t *testing.T) {
	// 20 per node stays within the correlator's spam filter, which lets a
	// source burst 25 Events about one object.
	const nodes, goroutinesPerNode, perGoroutine = 40, 4, 5
	const want = goroutinesPerNode * perGoroutine
	src := source(t)
	rec := kube.NewRecorder(env.Client, src)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ev-conc-%02d", i), UID: types.UID(fmt.Sprintf("uid-conc-%d", i))}}
		for range goroutinesPerNode {
			wg.Go(func() {
				<-start
				for range perGoroutine {
					rec.Node(n, true, contract.EventRebootFailed, "reboot command failed")
				}
			})
		}
	}
	close(start)
	wg.Wait()
	rec.Shutdown()

	objects := map[string][]int32{}
	for _, e := range listEvents(t, src) {
		objects[e.InvolvedObject.Name] = append(objects[e.InvolvedObject.Name], e.Count)
	}
	if len(objects) != nodes {
		t.Errorf("events on %d nodes, want %d", len(objects), nodes)
	}
	for name, counts := range objects {
		if len(counts) != 1 || counts[0] != want {
			t.Errorf("%s: %d repeats written as %d events with counts %v, want one with count %d", name, want, len(counts), counts, want)
		}
	}
}
