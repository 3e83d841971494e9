package healthwatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// A driver pod removes npu-stack's host files only when it stops while
// npu-hooks uninstall deletes its DaemonSet, and says so on its Node.
// (The stop itself, on a process node, is tested in tests/docs.)
func TestDriverPodLeavesTheHostOnlyForAnUninstall(t *testing.T) {
	k := contract.Keys{Domain: contract.DefaultDomain}
	for _, tc := range []struct {
		name    string
		deleted bool
		request string
		cleaned bool
	}{
		{name: "rolling update", request: "r1"},
		{name: "deleted by helm alone", deleted: true},
		{name: "deleted by npu-hooks uninstall", deleted: true, request: "r1", cleaned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range []string{"var/run/cdi/huawei-com-npu.yaml", "run/npu-stack/driver-ready", "var/lib/npu-stack/installer/.lock", "usr/local/Ascend/driver/version.info"} {
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "npu-stack-driver-910b", Namespace: "npu-operator"}}
			if tc.deleted {
				now := metav1.Now()
				ds.DeletionTimestamp, ds.Finalizers = &now, []string{metav1.FinalizerDeleteDependents}
			}
			if tc.request != "" {
				ds.Annotations = map[string]string{k.UninstallRequested(): tc.request}
			}
			client := fake.NewClientset(ds, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "npu-0"}})
			rec := kube.NewRecorder(client, Name)
			stopped, stop := context.WithCancel(context.Background())
			stop()
			f := leaveFlags{daemonSet: ds.Name, cdiSpecs: []string{"/var/run/cdi/huawei-com-npu.yaml"}}
			f.leaver(client, rec, logrus.New(), k, host.NewLinux(root), "npu-operator", "npu-0", "/run/npu-stack").leave(stopped)
			rec.Shutdown()

			for _, p := range []string{"var/run/cdi/huawei-com-npu.yaml", "run/npu-stack", "var/lib/npu-stack"} {
				if _, err := os.Stat(filepath.Join(root, p)); os.IsNotExist(err) != tc.cleaned {
					t.Errorf("%s: removed %v, want %v", p, os.IsNotExist(err), tc.cleaned)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "usr/local/Ascend/driver/version.info")); err != nil {
				t.Errorf("the installed driver must stay: %v", err)
			}
			evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, e := range evs.Items {
				if e.Reason == string(contract.EventHostFilesRemoved) {
					msgs = append(msgs, e.Message)
				}
			}
			switch {
			case !tc.cleaned && len(msgs) > 0:
				t.Errorf("events %q without a cleanup", msgs)
			case tc.cleaned && (len(msgs) != 1 || !strings.HasPrefix(msgs[0], "request r1: removed npu-stack's files from the host: /var/run/cdi/huawei-com-npu.yaml, /run/npu-stack, /var/lib/npu-stack")):
				t.Errorf("events %q, want one naming the request and the files", msgs)
			}
		})
	}
}
