package runner

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/NVIDIA/k8s-operator-libs/api/upgrade/v1alpha1"
	"github.com/NVIDIA/k8s-operator-libs/pkg/upgrade"
)

// GPU Operator's facts, as its chart, ClusterPolicy defaults and upgrade
// controller set them (deployments/gpu-operator/values.yaml,
// controllers/upgrade_controller.go, cmd/gpu-operator/main.go). The
// benchmark sets only maxParallelUpgrades and maxUnavailable; everything
// else is GPU Operator's default, so that the peer is measured as shipped.
const (
	// DefaultDriverName makes the library's keys nvidia.com/gpu-driver-*
	// (upgrade.SetDriverName("gpu")).
	DefaultDriverName = "gpu"
	// DefaultDriverLabels select the driver DaemonSets and their pods.
	DefaultDriverLabels = "app=nvidia-driver-daemonset"
	// DefaultValidatorSelector is WithValidationEnabled's pod selector.
	DefaultValidatorSelector = "app=nvidia-operator-validator"
	// DefaultMaxParallelUpgrades and DefaultMaxUnavailable are the
	// chart's values.
	DefaultMaxParallelUpgrades = 1
	DefaultMaxUnavailable      = "25%"
	// skipDrainSelector is what the controller appends to the drain pod
	// selector so that the operator never drains itself.
	skipDrainSelector = "nvidia.com/gpu-driver-upgrade-drain.skip!=true"
	// LeaderElectionID is the operator's lease name.
	LeaderElectionID = "53822513.nvidia.com"
	// EventSource is the name the operator's events carry.
	EventSource = "nvidia-gpu-operator"
)

// Policy is the upgrade policy the controller hands to ApplyState: GPU
// Operator's defaults (autoUpgrade on; no job wait; pod deletion not
// forced, 300 s, no emptyDir; drain off, 300 s; the timeouts as t scales
// them) with the scenario's parallelism and unavailability, and the drain
// selector amended as the controller amends it on every reconcile.
func Policy(maxParallel int, maxUnavailable string, t Timers) (*v1alpha1.DriverUpgradePolicySpec, error) {
	if maxParallel < 0 {
		return nil, fmt.Errorf("maxParallelUpgrades %d: want 0 (unlimited) or more", maxParallel)
	}
	mu := intstr.Parse(maxUnavailable)
	if _, err := intstr.GetScaledValueFromIntOrPercent(&mu, 100, true); err != nil {
		return nil, fmt.Errorf("maxUnavailable %q: %w", maxUnavailable, err)
	}
	return &v1alpha1.DriverUpgradePolicySpec{
		AutoUpgrade:         true,
		MaxParallelUpgrades: maxParallel,
		MaxUnavailable:      &mu,
		WaitForCompletion:   &v1alpha1.WaitForCompletionSpec{PodSelector: "", TimeoutSecond: 0},
		PodDeletion:         &v1alpha1.PodDeletionSpec{Force: false, TimeoutSecond: t.PodDeletionTimeout, DeleteEmptyDir: false},
		DrainSpec: &v1alpha1.DrainSpec{Enable: false, Force: false, PodSelector: skipDrainSelector,
			TimeoutSecond: t.DrainTimeout, DeleteEmptyDir: false},
	}, nil
}

// acceleratorPrefixes are the extended resources whose pods the pod
// deletion step removes: GPU Operator's filter takes pods requesting
// nvidia.com/gpu* or nvidia.com/mig-*; on this fleet the accelerators are
// Ascend NPUs.
var acceleratorPrefixes = []string{"huawei.com/Ascend"}

// deletionFilter is GPU Operator's pod deletion filter with the fleet's
// accelerator names: running or pending pods whose containers request or
// limit an accelerator. (GPU Operator also deletes pods holding a GPU
// through a DRA resource claim; the simulated fleet has none.)
func deletionFilter(pod corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending {
		return false
	}
	for _, c := range pod.Spec.Containers {
		for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			for name := range rl {
				for _, p := range acceleratorPrefixes {
					if strings.HasPrefix(string(name), p) {
						return true
					}
				}
			}
		}
	}
	return false
}

// digestEnv is the driver container's environment variable GPU Operator
// renders from the install-relevant driver config; its restart-only
// predicate restarts a driver pod in place (no eviction) only when the
// running and desired digests are equal and both present.
const digestEnv = "DRIVER_CONFIG_DIGEST"

func restartOnly(running, desired *corev1.PodSpec) (bool, error) {
	r, d := digest(running), digest(desired)
	return r != "" && d != "" && r == d, nil
}

func digest(spec *corev1.PodSpec) string {
	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.Name == digestEnv {
				return e.Value
			}
		}
	}
	return ""
}

var _ upgrade.RestartOnlyPredicate = restartOnly
