package auth_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// warnings collects the API server's warnings.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// TestNamespaceEnforcesPrivilegedAndWarnsAtBaseline: the Namespace the
// chart renders (createNamespace: true) lets the driver's privileged,
// host-path pods in (enforce privileged: it loads kernel modules), and the
// API server warns about them at baseline (warn and audit baseline).
func TestNamespaceEnforcesPrivilegedAndWarnsAtBaseline(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	s := install(t, "podsec", nil)
	ns, err := env.Client.CoreV1().Namespaces().Get(ctx, s.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/audit": "baseline", "pod-security.kubernetes.io/audit-version": "latest",
		"pod-security.kubernetes.io/warn": "baseline", "pod-security.kubernetes.io/warn-version": "latest",
	} {
		if got := ns.Labels[k]; got != v {
			t.Errorf("namespace %s: %s=%q, want %q", s.ns, k, got, v)
		}
	}

	w := &warnings{}
	cfg := env.Config()
	cfg.WarningHandler = w
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// What the driver pod is: privileged, /dev and /lib/modules from the host.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "like-the-driver", Namespace: s.ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "driver", Image: "registry.invalid/driver:1",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "dev", MountPath: "/dev"}}}},
			Volumes: []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev"}}}},
		},
	}
	if _, err := c.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("a privileged host-path pod is refused in %s: %v", s.ns, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	joined := strings.Join(w.list, "\n")
	if !strings.Contains(joined, `violate PodSecurity "baseline:latest"`) || !strings.Contains(joined, "privileged") {
		t.Errorf("no baseline warning for a privileged pod in %s; warnings: %q", s.ns, w.list)
	}
}
