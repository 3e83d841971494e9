package chart_test

import (
	"testing"
)

// TestDevicePluginMayReadTheKubeletsPods: the MindCluster v7.3.0 device
// plugin GETs the kubelet's /pods every listWatchPeriod whatever its flags
// (pkg/server/manager.go updateDeviceUsedInfo -> pkg/kubeclient/
// client_server.go GetPodsUsedNPUByKlt -> kube_connect.go
// getPodsByKltPort). The kubelet asks for get nodes/pods, then get
// nodes/proxy, from Kubernetes 1.33 (KubeletFineGrainedAuthz), and for
// get nodes/proxy alone before (kubernetes v1.37.0 pkg/kubelet/server/
// auth.go). So the plugin's ClusterRole grants nodes/pods, and
// nodes/proxy only on a cluster older than 1.33.
func TestDevicePluginMayReadTheKubeletsPods(t *testing.T) {
	for _, tc := range []struct {
		kubeVersion string
		proxy       bool
	}{
		{kubeVersion: "v1.37.1"},
		{kubeVersion: "v1.33.0"},
		{kubeVersion: "v1.32.9", proxy: true},
		{kubeVersion: "v1.30.0", proxy: true},
	} {
		t.Run(tc.kubeVersion, func(t *testing.T) {
			r, err := render(t, nil, renderOpts{kubeVersion: tc.kubeVersion})
			if err != nil {
				t.Fatal(err)
			}
			role := r.find("ClusterRole", "npu-stack-device-plugin")
			if role == nil {
				t.Fatalf("no ClusterRole npu-stack-device-plugin (have %v)", r.names("ClusterRole"))
			}
			if !ruleAllows(role, "", "nodes/pods", "get") {
				t.Error("the device plugin may not get nodes/pods: the kubelet refuses its GET /pods")
			}
			if got := ruleAllows(role, "", "nodes/proxy", "get"); got != tc.proxy {
				t.Errorf("get nodes/proxy granted %v on Kubernetes %s, want %v", got, tc.kubeVersion, tc.proxy)
			}
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				if ruleAllows(role, "", "nodes/proxy", verb) || ruleAllows(role, "", "nodes/pods", verb) {
					t.Errorf("the device plugin may %s nodes/proxy or nodes/pods", verb)
				}
			}
		})
	}
}
