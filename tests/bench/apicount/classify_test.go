package apicount

import (
	"net/url"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         Key
	}{
		{"GET", "/api/v1/nodes?labelSelector=a%3Db&limit=500", Key{"list", "nodes"}},
		{"GET", "/api/v1/nodes?watch=true&resourceVersion=5", Key{"watch", "nodes"}},
		{"GET", "/api/v1/nodes/n1", Key{"get", "nodes"}},
		{"PATCH", "/api/v1/nodes/n1", Key{"patch", "nodes"}},
		{"PATCH", "/api/v1/nodes/n1/status", Key{"patch", "nodes/status"}},
		{"GET", "/api/v1/pods?watch=1", Key{"watch", "pods"}},
		{"DELETE", "/api/v1/namespaces/npu/pods/p1", Key{"delete", "pods"}},
		{"POST", "/api/v1/namespaces/npu/pods/p1/eviction", Key{"create", "pods/eviction"}},
		{"POST", "/api/v1/namespaces/default/events", Key{"create", "events"}},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/npu/leases/l", Key{"update", "leases"}},
		{"GET", "/apis/apps/v1/daemonsets?watch=true", Key{"watch", "daemonsets"}},
		{"GET", "/api/v1/namespaces/npu", Key{"get", "namespaces"}},
		{"GET", "/version", Key{"get", "nonresource"}},
		{"GET", "/apis", Key{"get", "nonresource"}},
	} {
		u, err := url.Parse(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := Classify(c.method, u); got != c.want {
			t.Errorf("%s %s = %+v, want %+v", c.method, c.path, got, c.want)
		}
	}
}

func TestCounterSnapshotResets(t *testing.T) {
	c := NewCounter()
	c.add(Key{"patch", "nodes"})
	c.add(Key{"patch", "nodes"})
	c.conflict(Key{"patch", "nodes"})
	c.add(Key{"list", "nodes"})
	got := c.Snapshot()
	if len(got) != 2 || got[0].Verb != "list" || got[1].N != 2 || got[1].Conflict != 1 || !got[1].Write() || got[0].Write() {
		t.Fatalf("snapshot = %+v", got)
	}
	if len(c.Snapshot()) != 0 {
		t.Fatal("snapshot did not reset")
	}
}
