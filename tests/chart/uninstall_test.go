package chart_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestUninstallHookLeavesNothing: uninstall.cleanup renders npu-hooks
// uninstall as a pre-delete hook whose every object (the Job and its
// RBAC, RBAC at strictly lower weights) is deleted once it succeeded, and
// nothing of it without the value.
func TestUninstallHookLeavesNothing(t *testing.T) {
	for _, o := range mustRender(t, variant{name: "defaults"}).objects {
		if o.GetLabels()["app.kubernetes.io/component"] == "uninstall" {
			t.Errorf("uninstall.cleanup off renders %s %s", o.GetKind(), o.GetName())
		}
	}
	r := mustRender(t, variant{name: "cleanup", vals: map[string]any{"uninstall": map[string]any{"cleanup": true}, "labelDomain": "npu.example.com"}})
	weight := func(o *unstructured.Unstructured) int {
		var w int
		if _, err := fmt.Sscan(o.GetAnnotations()["helm.sh/hook-weight"], &w); err != nil {
			t.Fatalf("%s %s: hook weight %q", o.GetKind(), o.GetName(), o.GetAnnotations()["helm.sh/hook-weight"])
		}
		return w
	}
	job := r.find("Job", "npu-stack-uninstall")
	if job == nil {
		t.Fatal("uninstall.cleanup renders no Job npu-stack-uninstall")
	}
	kinds := map[string]bool{}
	for _, o := range r.objects {
		if o.GetLabels()["app.kubernetes.io/component"] != "uninstall" {
			continue
		}
		kinds[o.GetKind()] = true
		a := o.GetAnnotations()
		if a["helm.sh/hook"] != "pre-delete" {
			t.Errorf("%s %s: hook %q, want pre-delete", o.GetKind(), o.GetName(), a["helm.sh/hook"])
		}
		policy := strings.Split(a["helm.sh/hook-delete-policy"], ",")
		if !slices.Contains(policy, "before-hook-creation") || !slices.Contains(policy, "hook-succeeded") {
			t.Errorf("%s %s: delete policy %q; want before-hook-creation,hook-succeeded so nothing of it stays", o.GetKind(), o.GetName(), a["helm.sh/hook-delete-policy"])
		}
		if o.GetKind() != "Job" && weight(o) >= weight(job) {
			t.Errorf("hook RBAC %s %s weight %d not strictly below the uninstall Job's %d", o.GetKind(), o.GetName(), weight(o), weight(job))
		}
		for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"} {
			if o.GetLabels()[l] == "" {
				t.Errorf("%s %s lacks label %s", o.GetKind(), o.GetName(), l)
			}
		}
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Job"} {
		if !kinds[k] {
			t.Errorf("the uninstall hook has no %s", k)
		}
	}
	c := containers(t, job, "containers")["uninstall"]
	args := strs(c["args"])
	for _, a := range []string{"uninstall", "--namespace=npu-operator", "--release=npu-stack", "--label-domain=npu.example.com", "--timeout=6480s"} {
		if !hasArg(args, a) {
			t.Errorf("uninstall args lack %s: %q", a, args)
		}
	}
	if img := c["image"]; img != "ghcr.io/openfuyao/npu-stack/npu-hooks:"+loadChart(t).Metadata.AppVersion {
		t.Errorf("uninstall image %v, want the hooks image", img)
	}
	if sa := podSpec(t, job)["serviceAccountName"]; sa != "npu-stack-uninstall" {
		t.Errorf("uninstall Job runs as %v", sa)
	}
}

// TestDriverPodKnowsWhatToLeave: the driver entry names its own DaemonSet
// (whose deletion by npu-hooks uninstall it waits for to clean its host)
// and the CDI spec the device plugin writes, the same file.
func TestDriverPodKnowsWhatToLeave(t *testing.T) {
	for _, v := range []variant{{name: "defaults"}, {name: "two-profiles", vals: variants()[2].vals},
		{name: "cdi-off", vals: map[string]any{"cdi": map[string]any{"enabled": false}}},
		{name: "cdi-elsewhere", vals: map[string]any{"cdi": map[string]any{"kind": "example.com/npu", "specDir": "/etc/cdi"}}}} {
		r := mustRender(t, v)
		var spec string
		for _, ds := range r.ofKind("DaemonSet") {
			if gen, ok := containers(t, ds, "initContainers")["cdi-generate"]; ok {
				for _, a := range strs(gen["args"]) {
					if s, ok := strings.CutPrefix(a, "--output="); ok {
						spec = s
					}
				}
			}
		}
		n := 0
		for _, ds := range r.ofKind("DaemonSet") {
			if ds.GetLabels()["app"] != "npu-driver-daemonset" {
				continue
			}
			n++
			args := strs(containers(t, ds, "containers")["driver"]["command"])
			if !hasArg(args, "--daemonset="+ds.GetName()) {
				t.Errorf("%s: driver %s does not name its DaemonSet: %q", v.name, ds.GetName(), args)
			}
			var specs []string
			for _, a := range args {
				if s, ok := strings.CutPrefix(a, "--cdi-spec="); ok {
					specs = append(specs, s)
				}
			}
			if want := []string{spec}; spec == "" && len(specs) != 0 || spec != "" && !slices.Equal(specs, want) {
				t.Errorf("%s: driver %s removes CDI specs %q; the device plugin writes %q", v.name, ds.GetName(), specs, spec)
			}
		}
		if n == 0 {
			t.Errorf("%s: no driver DaemonSet", v.name)
		}
	}
}
