package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The sections of docs/workloads.md that tests run as
// written: the pod a user creates to use a chip with injection, and the
// hostPath recipe for runtimes without NRI.
const (
	workloadSection = "## Steps"
	recipeSection   = "## Runtimes without NRI: mount the driver yourself"
)

// DocumentedWorkload is the Pod of docs/workloads.md's steps, parsed
// strictly.
func DocumentedWorkload() (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := docYAML(workloadSection, pod); err != nil {
		return nil, err
	}
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("docs/workloads.md %q: %d containers, want 1", workloadSection, len(pod.Spec.Containers))
	}
	return pod, nil
}

// DocumentedRecipe is the hostPath recipe of docs/workloads.md for
// runtimes without NRI: its container's env and volume mounts, and its
// volumes.
func DocumentedRecipe() (corev1.Container, []corev1.Volume, error) {
	var pod struct {
		Spec corev1.PodSpec `json:"spec"`
	}
	if err := docYAML(recipeSection, &pod); err != nil {
		return corev1.Container{}, nil, err
	}
	if len(pod.Spec.Containers) != 1 {
		return corev1.Container{}, nil, fmt.Errorf("docs/workloads.md %q: %d containers, want 1", recipeSection, len(pod.Spec.Containers))
	}
	return pod.Spec.Containers[0], pod.Spec.Volumes, nil
}

// docYAML parses the first yaml block under heading in
// docs/workloads.md into out, refusing unknown fields.
func docYAML(heading string, out any) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "workloads.md"))
	if err != nil {
		return err
	}
	m := regexp.MustCompile("(?s)\n" + regexp.QuoteMeta(heading) + "\n.*?```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		return fmt.Errorf("docs/workloads.md: no yaml block under %q", heading)
	}
	if err := yaml.UnmarshalStrict(m[1], out); err != nil {
		return fmt.Errorf("docs/workloads.md %q: %w", heading, err)
	}
	return nil
}
