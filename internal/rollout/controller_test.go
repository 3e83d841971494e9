package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// The actions of one decision go out several nodes at once (a serial loop
// bounds a 5,000-node rollout by the round-trip time), as many as
// WritesInFlight allows and no more, and every one is applied. The API
// server here holds the first limit patches until all of them have
// arrived: a serial loop would never get past the first.
func TestWritersRunNodesConcurrently(t *testing.T) {
	for _, tc := range []struct{ configured, limit int }{{0, DefaultWritesInFlight}, {4, 4}} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) { testWriters(t, tc.configured, tc.limit) })
	}
}

func testWriters(t *testing.T, configured, limit int) {
	n := 3 * limit
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	patched := map[string]string{}
	arrived, inFlight, maxInFlight := 0, 0, 0
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/")
		if r.Method != http.MethodPatch || name == r.URL.Path {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		var body struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		arrived++
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		if arrived == limit {
			close(all)
		}
		patched[name] = body.Metadata.Labels[keys.UpgradeState()]
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		select {
		case <-all:
		case <-ctx.Done():
			http.Error(w, "patches were not applied concurrently", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name}})
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := builder{k: keys, now: now}
	var acts []Action
	for i := 0; i < n; i++ {
		acts = append(acts, b.transition(nv(fmt.Sprintf("n%d", i), in(contract.StateCordonRequired)), contract.StateWaitForJobsRequired, "cordoned"))
	}
	c := NewController(Config{Client: client, Log: logrus.New(), Keys: keys, NodeSelector: labels.Everything(), DriverSelector: labels.Everything(),
		WritesInFlight: configured})
	q, stop := c.startWriters(ctx)
	c.enqueue(q, acts)
	stop()
	if !c.idle() {
		t.Fatal("nodes still marked busy after every write returned")
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlight != limit {
		t.Errorf("%d patches in flight at most, want %d", maxInFlight, limit)
	}
	for i := 0; i < n; i++ {
		if got := patched[fmt.Sprintf("n%d", i)]; got != string(contract.StateWaitForJobsRequired) {
			t.Errorf("node n%d patched to %q, want %s", i, got, contract.StateWaitForJobsRequired)
		}
	}
}
