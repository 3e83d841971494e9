package kube

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// WrapTransport reaches the requests of the clientset Client builds (the
// protobuf copy of the config, not only the JSON one it returns).
func TestClientRequestsGoThroughWrapTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.0"}`))
	}))
	defer srv.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + srv.URL + "}}]\n" +
		"users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	o := ClientOptions{Kubeconfig: kc, WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &n} }}
	c, _, err := o.Client()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Discovery().ServerVersion(); err != nil || v.GitVersion != "v1.37.0" {
		t.Fatalf("server version %v: %v", v, err)
	}
	if n.Load() != 1 {
		t.Fatalf("%d requests went through the wrapper, want 1", n.Load())
	}
}
