package scenario

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestContainerEnvResolvesValuesAndOwnLimits(t *testing.T) {
	c := corev1.Container{Name: "rollout",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
		Env: []corev1.EnvVar{
			{Name: "PLAIN", Value: "x"},
			{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
			{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		}}
	got, err := containerEnv(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PLAIN=x", "GOMEMLIMIT=268435456", "MEM_MI=256"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("env %v, want %v", got, want)
	}

	for name, e := range map[string]corev1.EnvVar{
		"limit not set": {Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		"a request":     {Name: "REQ", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory"}}},
		"a field":       {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	} {
		bad := c
		bad.Env = []corev1.EnvVar{e}
		if _, err := containerEnv(bad); err == nil || !strings.Contains(err.Error(), e.Name) {
			t.Errorf("%s: error %v, want one naming %s", name, err, e.Name)
		}
	}
}
