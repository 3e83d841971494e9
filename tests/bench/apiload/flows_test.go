package apiload

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Attribution is the API server's own classification of requests, so it
// is tested against the test bed's real API server.
var cp *testbed.ControlPlane

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var err error
	cp, err = testbed.Start(ctx, testbed.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := cp.Stop(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "apiload: stop:", err)
		code = 1
	}
	os.Exit(code)
}

// Requests made as the attributed user, impersonated with the admin's
// credentials as the benchmark's proxies make them, are executed under
// the user's FlowSchema; the admin's own requests are not.
func TestAttributeTellsTheUsersRequestsApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	const user = "npu-bench:Side_1"
	flow, err := Attribute(ctx, admin, user)
	if err != nil {
		t.Fatal(err)
	}
	if flow != "npu-bench-npu-bench-side-1" {
		t.Errorf("FlowSchema %q: want the user's name made an object name", flow)
	}
	if again, err := Attribute(ctx, admin, user); err != nil || again != flow {
		t.Fatalf("attributing again: %q, %v; want %q (idempotent)", again, err, flow)
	}
	rc := cp.Config()
	rc.Impersonate.UserName = user
	side, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	take := func() Snapshot {
		t.Helper()
		s, err := Take(ctx, admin.CoreV1().RESTClient(), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ns := "apiload-" + fmt.Sprint(time.Now().UnixNano())
	a := take()
	if _, err := side.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the attributed user may not act: %v", err)
	}
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cm-", i)}}
		if _, err := side.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b := take()
	if got := b.Exec[flow] - a.Exec[flow]; got <= 0 {
		t.Fatalf("execution time under %s after 21 of the user's writes: %v, want > 0 (by schema: %v)", flow, got, b.Exec)
	}
	if share, ok := ExecShare(a, b, flow); !ok || share <= 0 || share >= 1 {
		t.Fatalf("the user's share %v, %t: want between 0 and 1 (the admin's /metrics reads are the rest)", share, ok)
	}
	for i := range 20 {
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, fmt.Sprint("cm-", i), metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if c := take(); c.Exec[flow] != b.Exec[flow] {
		t.Fatalf("the admin's requests were counted under %s: %v then %v", flow, b.Exec[flow], c.Exec[flow])
	}
}
