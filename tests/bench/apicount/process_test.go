package apicount

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The proxy runs as a process of its own, forwards to the API server of
// its kubeconfig as the user it was given and hands out its counts once,
// then from zero again.
func TestRemoteCountsInItsOwnProcess(t *testing.T) {
	const user = "npu-bench:side"
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Impersonate-User"); got != user {
			http.Error(w, "forwarded as "+got, http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusConflict)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer upstream.Close()
	dir := t.TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: upstream.URL}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, admin); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bin, err := Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartProcess(ctx, bin, admin, user, filepath.Join(dir, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if r.Pid() == os.Getpid() || r.Pid() == 0 {
		t.Fatalf("proxy pid %d: not a process of its own", r.Pid())
	}
	for _, req := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/nodes"},
		{http.MethodGet, "/api/v1/nodes"},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/x/leases/l"},
	} {
		hr, _ := http.NewRequest(req.method, r.URL()+req.path, nil)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden {
			t.Fatalf("%s %s: the proxy did not forward as %s", req.method, req.path, user)
		}
	}
	got, err := r.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Count{{Key: Key{"list", "nodes"}, N: 2}, {Key: Key{"update", "leases"}, N: 1, Conflict: 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}
	if again, err := r.Snapshot(ctx); err != nil || len(again) != 0 {
		t.Fatalf("second snapshot = %+v, %v; want empty", again, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
