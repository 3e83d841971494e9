// Package events_test checks the Event recorder every binary uses against
// the real API server.
package events_test

import (
	"context"
	"fmt"
	"os"
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

// A rollout's first decision records an Event per node at once; client-go's
// broadcaster dropped everything past 1,000 queued and abandoned the queue
// at shutdown. Every Event recorded before Shutdown must be written by the
// time it returns, and repeats must still fold into a count.
func TestEveryEventWrittenByShutdown(t *testing.T) {
	const nodes, perNode = 1500, 2
	rec := kube.NewRecorder(env.Client, "events-test")
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

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "source=events-test"})
	if err != nil {
		t.Fatal(err)
	}
	written, warnings, repeats := 0, 0, int32(0)
	for _, e := range list.Items {
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
