package procnode

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestImageBinary(t *testing.T) {
	for img, want := range map[string]string{
		"ghcr.io/openfuyao/npu-stack/npu-hooks:v0.1.0": "npu-hooks",
		"npu-rebooter": "npu-rebooter",
		"registry:5000/npu-healthwatch@sha256:abcd":      "npu-healthwatch",
		"registry:5000/x/npu-healthwatch:1@sha256:abcd":  "npu-healthwatch",
		"swr.cn-south-1.myhuaweicloud.com/ascend/device": "",
		"registry.example/pause:3.10":                    "",
	} {
		if got := imageBinary(img); got != want {
			t.Errorf("imageBinary(%q) = %q, want %q", img, got, want)
		}
	}
}

func TestArgvCombinesCommandAndArgs(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n1"}
	c := &corev1.Container{Name: "c", Image: "x/npu-hooks:1", Args: []string{"rollout", "--node=$(NODE_NAME)", "$$(NODE_NAME)", "$(UNSET)"}}
	got, err := argv("/bin", c, env)
	want := []string{"/bin/npu-hooks", "rollout", "--node=n1", "$(NODE_NAME)", "$(UNSET)"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("argv = %q, %v; want %q", got, err, want)
	}
	c = &corev1.Container{Name: "c", Image: "x/npu-healthwatch:1", Command: []string{"/usr/local/bin/npu-healthwatch", "driver-entry"}, Args: []string{"--"}}
	got, err = argv("/bin", c, env)
	if want := []string{"/bin/npu-healthwatch", "driver-entry", "--"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("argv = %q, %v; want %q", got, err, want)
	}
	c = &corev1.Container{Name: "c", Image: "x/npu-hooks:1", Command: []string{"sh", "-c", "true"}}
	if _, err := argv("/bin", c, env); err == nil || !strings.Contains(err.Error(), "sh") {
		t.Fatalf("a shell command in our image must be refused clearly, got %v", err)
	}
	c = &corev1.Container{Name: "driver", Image: "swr.example/ascendhub/npu-driver:25.5.0-910b", Command: []string{"/opt/npu-stack/bin/npu-healthwatch", "driver-entry", "--", "/install.sh"}}
	got, err = argv("/bin", c, env)
	if want := []string{"/bin/npu-healthwatch", "driver-entry", "--", "/install.sh"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("our binary in a vendor image: argv = %q, %v; want %q", got, err, want)
	}
	if got, err := argv("/bin", &corev1.Container{Image: "vendor/plugin", Command: []string{"/bin/device-plugin"}}, env); got != nil || err != nil {
		t.Fatalf("vendor command in a vendor image: %q, %v; want simulated (nil)", got, err)
	}
	if got, err := argv("/bin", &corev1.Container{Image: "pause"}, env); got != nil || err != nil {
		t.Fatalf("foreign image: %q, %v; want simulated (nil)", got, err)
	}
}

func TestFieldValue(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"a/b": "c"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "sa"},
	}
	for field, want := range map[string]string{
		"metadata.name": "p", "metadata.namespace": "ns", "metadata.uid": "u1", "spec.nodeName": "node-1",
		"spec.serviceAccountName": "sa", "metadata.labels['app']": "x", "metadata.annotations['a/b']": "c",
	} {
		if got, err := fieldValue(pod, field); err != nil || got != want {
			t.Errorf("fieldValue(%s) = %q, %v; want %q", field, got, err, want)
		}
	}
	if _, err := fieldValue(pod, "status.phase"); err == nil {
		t.Error("unsupported field accepted silently")
	}
}

func TestResourceValue(t *testing.T) {
	c := &corev1.Container{Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("1500m")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}}
	for _, tc := range []struct {
		res, divisor, want string
	}{
		{"limits.memory", "", "268435456"},
		{"limits.memory", "1Mi", "256"},
		{"requests.memory", "1Mi", "64"},
		{"limits.cpu", "", "2"}, // rounded up, as the kubelet does
		{"limits.cpu", "1m", "1500"},
		{"requests.cpu", "1", "16"}, // unset: the node's allocatable
	} {
		ref := &corev1.ResourceFieldSelector{Resource: tc.res}
		if tc.divisor != "" {
			ref.Divisor = resource.MustParse(tc.divisor)
		}
		got, err := resourceValue(c, ref)
		if err != nil || got != tc.want {
			t.Errorf("%s / %q = %q, %v; want %s", tc.res, tc.divisor, got, err, tc.want)
		}
	}
	if _, err := resourceValue(c, &corev1.ResourceFieldSelector{Resource: "memory"}); err == nil {
		t.Error("a malformed resource was accepted")
	}
}
