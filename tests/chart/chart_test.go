package chart_test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// variant is one point of the values matrix.
type variant struct {
	name string
	vals map[string]any
	opts renderOpts
}

const serviceMonitorAPI = "monitoring.coreos.com/v1/ServiceMonitor"

func variants() []variant {
	twoProfiles := map[string]any{"driver": map[string]any{"profiles": []any{
		map[string]any{"name": "910b", "chip": "910b", "kernel": "5.15.0-105-generic", "os": "ubuntu22.04"},
		map[string]any{"name": "310p", "chip": "310p", "kernel": "5.15.0-105-generic", "os": "ubuntu22.04", "nodeSelector": map[string]any{"pool": "inference"}},
	}}}
	return []variant{
		{name: "defaults"},
		{name: "driver-disabled", vals: map[string]any{"driver": map[string]any{"enabled": false, "hostDriverPath": "/var/lib/Ascend/driver"}}},
		{name: "two-profiles", vals: twoProfiles},
		{name: "servicemonitor-api", opts: renderOpts{apiVersions: []string{serviceMonitorAPI}}},
		{name: "servicemonitor-offline", vals: map[string]any{"exporter": map[string]any{"serviceMonitor": map[string]any{"renderWithoutAPI": true}}}},
		{name: "servicemonitor-off", vals: map[string]any{"exporter": map[string]any{"serviceMonitor": map[string]any{"enabled": false}}}, opts: renderOpts{apiVersions: []string{serviceMonitorAPI}}},
		{name: "job-mode", vals: map[string]any{"hooks": map[string]any{"mode": "job"}}},
		{name: "auto", vals: map[string]any{"driver": map[string]any{"upgradePolicy": map[string]any{"autoUpgrade": true, "settleSeconds": 300, "maintenanceWindows": []any{
			map[string]any{"days": []any{"sat", "sun"}, "start": "22:00", "end": "04:00", "timeZone": "Europe/Berlin", "inFlight": "wait"}}}},
			"recoveryPolicy": map[string]any{"autoRecover": true, "maintenanceWindows": []any{map[string]any{"days": []any{"mon"}, "start": "00:00", "end": "24:00", "timeZone": "UTC"}}}}},
		{name: "sysrq-pull-secrets-namespace", vals: map[string]any{"rebooter": map[string]any{"method": "sysrq"}, "imagePullSecrets": []any{"regcred"}, "createNamespace": true,
			"driver": map[string]any{"upgradePolicy": map[string]any{"rerollTargets": []any{map[string]any{"namespace": "dra", "name": "npu-dra-plugin"}, map[string]any{"namespace": "dra", "selector": "app=x"}}}}}},
		{name: "mixed-fleet", vals: mixedFleet},
		{name: "no-inject", vals: map[string]any{"cdi": map[string]any{"inject": false}}},
		{name: "uninstall-cleanup", vals: map[string]any{"uninstall": map[string]any{"cleanup": true}}},
	}
}

func mustRender(t *testing.T, v variant) *rendered {
	t.Helper()
	r, err := render(t, v.vals, v.opts)
	if err != nil {
		t.Fatalf("render %s: %v", v.name, err)
	}
	return r
}

func nested[T any](t *testing.T, o *unstructured.Unstructured, path ...string) T {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s %s: no %s (%v)", o.GetKind(), o.GetName(), strings.Join(path, "."), err)
	}
	typed, ok := v.(T)
	if !ok {
		t.Fatalf("%s %s: %s is %T", o.GetKind(), o.GetName(), strings.Join(path, "."), v)
	}
	return typed
}

func podSpec(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	if o.GetKind() == "CronJob" {
		return nested[map[string]any](t, o, "spec", "jobTemplate", "spec", "template", "spec")
	}
	return nested[map[string]any](t, o, "spec", "template", "spec")
}

func containers(t *testing.T, o *unstructured.Unstructured, field string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	list, _ := podSpec(t, o)[field].([]any)
	for _, c := range list {
		m := c.(map[string]any)
		out[m["name"].(string)] = m
	}
	return out
}

func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func hasArg(args []string, want string) bool { return slices.Contains(args, want) }

func TestDefaultsRenderTheWholeStack(t *testing.T) {
	r := mustRender(t, variant{name: "defaults"})
	if got, want := r.names("DaemonSet"), []string{"npu-stack-device-plugin", "npu-stack-driver-910b", "npu-stack-exporter", "npu-stack-nri-injector", "npu-stack-rebooter"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("DaemonSets %v, want %v", got, want)
	}
	for _, o := range r.objects {
		// The vendor device plugin writes its device-info ConfigMap and
		// Events in kube-system (MindCluster api.KubeNS): its Role is there.
		kubeSystem := o.GetLabels()["app.kubernetes.io/component"] == "device-plugin" && (o.GetKind() == "Role" || o.GetKind() == "RoleBinding")
		if ns := o.GetNamespace(); ns != "" && ns != "npu-operator" && (!kubeSystem || ns != "kube-system") {
			t.Errorf("%s %s in namespace %q, want npu-operator", o.GetKind(), o.GetName(), ns)
		}
		l := o.GetLabels()
		for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/component", "helm.sh/chart"} {
			if l[k] == "" {
				t.Errorf("%s %s lacks label %s", o.GetKind(), o.GetName(), k)
			}
		}
	}
	if r.find("ServiceMonitor", "npu-stack-exporter") != nil {
		t.Error("ServiceMonitor rendered although monitoring.coreos.com/v1 is not available")
	}

	drv := r.find("DaemonSet", "npu-stack-driver-910b")
	if drv.GetLabels()["app"] != "npu-driver-daemonset" || nested[map[string]any](t, drv, "spec", "template", "metadata", "labels")["app"] != "npu-driver-daemonset" {
		t.Error("driver DaemonSet or its pods lack app=npu-driver-daemonset")
	}
	if got := nested[string](t, drv, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"); got != "100%" {
		t.Errorf("driver maxUnavailable %q, want 100%%", got)
	}
	sel := podSpec(t, drv)["nodeSelector"].(map[string]any)
	wantSel := map[string]any{"openfuyao.com/npu.present": "true", "openfuyao.com/npu.chip": "910b",
		"feature.node.kubernetes.io/kernel-version.full": "5.15.0-105-generic", "openfuyao.com/npu.os": "ubuntu22.04"}
	if !reflect.DeepEqual(sel, wantSel) {
		t.Errorf("driver nodeSelector %v, want %v", sel, wantSel)
	}
	cs := containers(t, drv, "containers")
	driver, watch := cs["driver"], cs["watch"]
	if driver == nil || watch == nil {
		t.Fatalf("driver pod containers %v, want driver and watch", slices.Collect(maps.Keys(cs)))
	}
	if img := driver["image"]; img != "docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-5.15.0-105-generic-ubuntu22.04" {
		t.Errorf("driver image %v", img)
	}
	cmd := strs(driver["command"])
	sep := slices.Index(cmd, "--")
	if len(cmd) < 2 || cmd[0] != "/opt/npu-stack/bin/npu-healthwatch" || cmd[1] != "driver-entry" || sep < 0 ||
		!reflect.DeepEqual(cmd[sep+1:], []string{"/usr/local/Ascend/driver.run", "--full", "--quiet", "--install-for-all"}) {
		t.Errorf("driver command %q: want npu-healthwatch driver-entry ... -- <install command>", cmd)
	}
	if !hasArg(cmd, "--driver-version=25.5.0") {
		t.Errorf("driver-entry lacks the desired version: %q", cmd)
	}
	if p := driver["readinessProbe"].(map[string]any)["exec"].(map[string]any)["command"]; !slices.Contains(strs(p), "validate") {
		t.Errorf("driver readiness %v, want the validate marker check", p)
	}
	// The kubelet's default exec timeout (1 s) flaps a Go binary's probe
	// on a loaded node.
	if to, _ := driver["readinessProbe"].(map[string]any)["timeoutSeconds"].(float64); to < 5 {
		t.Errorf("driver readiness probe timeoutSeconds %v, want at least 5", driver["readinessProbe"].(map[string]any)["timeoutSeconds"])
	}
	if args := strs(watch["args"]); args[0] != "watch" || !hasArg(args, "--probe-interval=60s") || !hasArg(args, "--failure-threshold=3") {
		t.Errorf("health-watch args %q", args)
	}
	if init := containers(t, drv, "initContainers")["install-tools"]; init["securityContext"].(map[string]any)["privileged"] == true {
		t.Error("install-tools init container is privileged; it only copies a file")
	}

	dp := r.find("DaemonSet", "npu-stack-device-plugin")
	inits := containers(t, dp, "initContainers")
	if gate := strs(inits["wait-for-driver"]["args"]); gate[0] != "validate" || !hasArg(gate, "--wait") || hasArg(gate, "--driver-version=25.5.0") {
		t.Errorf("device plugin gate args %q", gate)
	}
	if cdi := strs(inits["cdi-generate"]["args"]); !reflect.DeepEqual(cdi[:2], []string{"cdi", "generate"}) || !hasArg(cdi, "--kind=huawei.com/npu") {
		t.Errorf("CDI generation args %q", cdi)
	}
	if _, ok := podSpec(t, dp)["runtimeClassName"]; ok {
		t.Error("device plugin sets runtimeClassName; it runs with the cluster's default runtime")
	}

	rb := r.find("DaemonSet", "npu-stack-rebooter")
	checkSystemdRebooter(t, rb)
	rargs := strs(containers(t, rb, "containers")["rebooter"]["args"])
	for _, a := range []string{"run", "--node-name=$(NODE_NAME)", "--method=systemd", "--dbus-socket=/run/dbus/system_bus_socket", "--auto-upgrade=false", "--auto-recover=false", "--uptime-guard=10m", "--slots=1", "--max-reboots=3",
		"--reboot-attempts=3", "--fallback-method=none", "--recovery-drain-timeout=300s"} {
		if !hasArg(rargs, a) {
			t.Errorf("rebooter args lack %s: %q", a, rargs)
		}
	}
	if r.find("Service", "npu-stack-exporter") == nil {
		t.Error("no exporter Service")
	}
	if !strings.Contains(r.notes, "approve-reboot=true") || !strings.Contains(r.notes, "driver-upgrade-state") || !strings.Contains(r.notes, "--timeout") {
		t.Errorf("NOTES do not tell the next commands:\n%s", r.notes)
	}
}

// checkSystemdRebooter asserts the rebooter of method systemd: it reaches
// the host's logind (or systemd) through the host's D-Bus system bus,
// whose directory /run/dbus is mounted read-only at the same path, as
// root with no capability (both grant a peer of their uid, root, without
// polkit and without a capability check), no hostPID, not privileged.
func checkSystemdRebooter(t *testing.T, rb *unstructured.Unstructured) {
	t.Helper()
	spec := podSpec(t, rb)
	if _, ok := spec["hostPID"]; ok {
		t.Errorf("systemd rebooter sets hostPID %v; the D-Bus socket makes it unnecessary", spec["hostPID"])
	}
	c := containers(t, rb, "containers")["rebooter"]
	sc := c["securityContext"].(map[string]any)
	caps, _ := sc["capabilities"].(map[string]any)
	if sc["privileged"] != false || sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true ||
		fmt.Sprint(sc["runAsUser"]) != "0" ||
		!reflect.DeepEqual(strs(caps["drop"]), []string{"ALL"}) || len(strs(caps["add"])) != 0 {
		t.Errorf("rebooter security context %v: want root, unprivileged, no privilege escalation, read-only root, capabilities ALL dropped and none added", sc)
	}
	vols, _ := spec["volumes"].([]any)
	mounts, _ := c["volumeMounts"].([]any)
	if len(vols) != 1 || len(mounts) != 1 {
		t.Fatalf("rebooter volumes %v, mounts %v: want exactly the host's D-Bus directory", vols, mounts)
	}
	vol, mnt := vols[0].(map[string]any), mounts[0].(map[string]any)
	hp, _ := vol["hostPath"].(map[string]any)
	if hp["path"] != "/run/dbus" || hp["type"] != "Directory" {
		t.Errorf("rebooter volume %v: want hostPath /run/dbus of type Directory (a bind-mounted socket file goes stale when dbus restarts)", vol)
	}
	if mnt["name"] != vol["name"] || mnt["mountPath"] != "/run/dbus" || mnt["readOnly"] != true {
		t.Errorf("rebooter mount %v: want volume %v read-only at /run/dbus", mnt, vol["name"])
	}
}

func TestHooksWeightsAndDeletePolicies(t *testing.T) {
	r := mustRender(t, variant{name: "defaults"})
	weight := func(o *unstructured.Unstructured) int {
		var w int
		if _, err := fmt.Sscan(o.GetAnnotations()["helm.sh/hook-weight"], &w); err != nil {
			t.Fatalf("%s %s: hook weight %q", o.GetKind(), o.GetName(), o.GetAnnotations()["helm.sh/hook-weight"])
		}
		return w
	}
	pre := r.find("Job", "npu-stack-preflight")
	if pre == nil || pre.GetAnnotations()["helm.sh/hook"] != "pre-install,pre-upgrade" {
		t.Fatalf("preflight Job missing or not a pre-install/pre-upgrade hook: %v", pre)
	}
	for _, o := range r.objects {
		a := o.GetAnnotations()
		if a["helm.sh/hook"] == "" {
			continue
		}
		if !strings.Contains(a["helm.sh/hook-delete-policy"], "before-hook-creation") {
			t.Errorf("hook %s %s delete policy %q lacks before-hook-creation", o.GetKind(), o.GetName(), a["helm.sh/hook-delete-policy"])
		}
		if o.GetKind() != "Job" && a["helm.sh/hook"] == "pre-install,pre-upgrade" && weight(o) >= weight(pre) {
			t.Errorf("hook RBAC %s %s weight %d not strictly below the preflight Job's %d", o.GetKind(), o.GetName(), weight(o), weight(pre))
		}
	}
	if got := strs(podSpec(t, pre)["containers"].([]any)[0].(map[string]any)["args"]); got[0] != "preflight" ||
		!hasArg(got, `--profile={"chip":"910b","image":"docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-5.15.0-105-generic-ubuntu22.04","installMode":"run","kernel":"5.15.0-105-generic","name":"910b","nodeSelector":{},"os":"ubuntu22.04"}`) {
		t.Errorf("preflight args %q", got)
	}
	roll := r.find("Job", "npu-stack-rollout")
	if roll == nil || roll.GetAnnotations()["helm.sh/hook"] != "post-install,post-upgrade,post-rollback" {
		t.Fatalf("rollout Job missing or not a post-install/upgrade/rollback hook")
	}
	if d := nested[float64](t, roll, "spec", "activeDeadlineSeconds"); d != 7200 {
		t.Errorf("rollout activeDeadlineSeconds %v", d)
	}
	// The rollout's own RBAC is regular: it exists before post hooks, for
	// the resume CronJob and in job mode.
	if sa := r.find("ServiceAccount", "npu-stack-rollout"); sa == nil || sa.GetAnnotations()["helm.sh/hook"] != "" {
		t.Error("rollout ServiceAccount must be a regular object")
	}
	cj := r.find("CronJob", "npu-stack-rollout-resume")
	if cj == nil || nested[string](t, cj, "spec", "concurrencyPolicy") != "Forbid" {
		t.Fatal("resume CronJob missing or not concurrencyPolicy Forbid")
	}
	rollArgs := strs(podSpec(t, roll)["containers"].([]any)[0].(map[string]any)["args"])
	cjArgs := strs(podSpec(t, cj)["containers"].([]any)[0].(map[string]any)["args"])
	if !reflect.DeepEqual(append(slices.Clone(rollArgs), "--resume"), cjArgs) {
		t.Errorf("CronJob args %q differ from the hook's %q plus --resume", cjArgs, rollArgs)
	}
	for _, a := range []string{"rollout", "--namespace=npu-operator", "--label-domain=npu.openfuyao.com", "--auto-upgrade=false", "--max-unavailable=25%",
		"--max-parallel-upgrades=1", "--reroll=npu-operator/npu-stack-device-plugin", "--reroll=npu-operator/npu-stack-exporter"} {
		if !hasArg(rollArgs, a) {
			t.Errorf("rollout args lack %s: %q", a, rollArgs)
		}
	}
}

// ruleAllows reports whether a ClusterRole/Role grants verb on resource.
func ruleAllows(o *unstructured.Unstructured, group, resource, verb string) bool {
	rules, _ := o.Object["rules"].([]any)
	for _, r := range rules {
		m := r.(map[string]any)
		g, res, verbs := strs(m["apiGroups"]), strs(m["resources"]), strs(m["verbs"])
		if (slices.Contains(g, group) || slices.Contains(g, "*")) && (slices.Contains(res, resource) || slices.Contains(res, "*")) &&
			(slices.Contains(verbs, verb) || slices.Contains(verbs, "*")) {
			return true
		}
	}
	return false
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			r := mustRender(t, v)
			roles := append(r.ofKind("ClusterRole"), r.ofKind("Role")...)
			if len(roles) == 0 {
				t.Fatal("no roles rendered")
			}
			evict, patchNodes := map[string]bool{}, map[string]bool{}
			for _, role := range roles {
				comp := role.GetLabels()["app.kubernetes.io/component"]
				for _, verb := range []string{"get", "list", "watch"} {
					if ruleAllows(role, "", "secrets", verb) {
						t.Errorf("%s %s can %s Secrets", role.GetKind(), role.GetName(), verb)
					}
				}
				if ruleAllows(role, "", "pods/eviction", "create") {
					evict[comp] = true
				}
				if ruleAllows(role, "", "nodes", "patch") || ruleAllows(role, "", "nodes", "update") {
					patchNodes[comp] = true
				}
			}
			for comp := range evict {
				if comp != "rollout" && comp != "rebooter" {
					t.Errorf("component %s may evict pods", comp)
				}
			}
			for comp := range patchNodes {
				// The vendor device plugin patches its own labels and
				// annotations, as upstream's ClusterRole allows; the NRI
				// injector its injection-status annotation. npu-hooks
				// uninstall (the pre-delete hook) removes npu-stack's keys
				// and cordons once the agents are stopped.
				if comp != "rollout" && comp != "rebooter" && comp != "driver" && comp != "device-plugin" && comp != "nri-injector" && comp != "uninstall" {
					t.Errorf("component %s may patch Nodes", comp)
				}
			}
			if !evict["rollout"] || !patchNodes["rollout"] {
				t.Error("the rollout cannot evict pods or cordon nodes")
			}
			// Every pod runs under its own service account that exists.
			for _, kind := range []string{"DaemonSet", "Job", "CronJob"} {
				for _, o := range r.ofKind(kind) {
					sa, _ := podSpec(t, o)["serviceAccountName"].(string)
					if r.find("ServiceAccount", sa) == nil {
						t.Errorf("%s %s runs as service account %q that the chart does not render", kind, o.GetName(), sa)
					}
				}
			}
		})
	}
}

func TestVariants(t *testing.T) {
	t.Run("driver disabled passes the host driver through", func(t *testing.T) {
		r := mustRender(t, variants()[1])
		for _, ds := range r.ofKind("DaemonSet") {
			if ds.GetLabels()["app"] == "npu-driver-daemonset" {
				t.Errorf("driver DaemonSet %s rendered with driver.enabled=false", ds.GetName())
			}
		}
		dp := r.find("DaemonSet", "npu-stack-device-plugin")
		gate := strs(containers(t, dp, "initContainers")["wait-for-driver"]["args"])
		if !hasArg(gate, "--require-marker=false") || !hasArg(gate, "--driver-root=/var/lib/Ascend/driver") {
			t.Errorf("device plugin gate %q does not point at the pre-installed driver", gate)
		}
		for _, vol := range podSpec(t, dp)["volumes"].([]any) {
			m := vol.(map[string]any)
			if m["name"] == "driver-root" && m["hostPath"].(map[string]any)["path"] != "/var/lib/Ascend/driver" {
				t.Errorf("device plugin driver-root volume %v", m)
			}
		}
		if r.find("ServiceAccount", "npu-stack-driver") != nil {
			t.Error("driver service account rendered without a driver")
		}
		// docs/installation.md ("Pre-installed driver"): no health-watch,
		// but the rollout still runs (it gives back nodes an earlier
		// upgrade left in flight).
		for _, ds := range r.ofKind("DaemonSet") {
			if _, ok := containers(t, ds, "containers")["watch"]; ok {
				t.Errorf("%s has a health-watch with driver.enabled=false", ds.GetName())
			}
		}
		if r.find("Job", "npu-stack-rollout") == nil {
			t.Errorf("no rollout Job with driver.enabled=false (docs say it runs); Jobs %v", r.names("Job"))
		}
	})
	t.Run("two profiles give two driver DaemonSets", func(t *testing.T) {
		r := mustRender(t, variants()[2])
		a, b := r.find("DaemonSet", "npu-stack-driver-910b"), r.find("DaemonSet", "npu-stack-driver-310p")
		if a == nil || b == nil {
			t.Fatalf("driver DaemonSets %v", r.names("DaemonSet"))
		}
		sb := podSpec(t, b)["nodeSelector"].(map[string]any)
		if sb["openfuyao.com/npu.chip"] != "310p" || sb["pool"] != "inference" {
			t.Errorf("310p profile selector %v", sb)
		}
		img := containers(t, b, "containers")["driver"]["image"].(string)
		if !strings.HasSuffix(img, ":25.5.0-310p-5.15.0-105-generic-ubuntu22.04") {
			t.Errorf("310p driver image %s", img)
		}
		if reflect.DeepEqual(nested[map[string]any](t, a, "spec", "selector"), nested[map[string]any](t, b, "spec", "selector")) {
			t.Error("the two driver DaemonSets share a selector and would fight over pods")
		}
	})
	t.Run("ServiceMonitor follows the API and the override", func(t *testing.T) {
		for i, want := range map[int]bool{0: false, 3: true, 4: true, 5: false} {
			r := mustRender(t, variants()[i])
			if got := r.find("ServiceMonitor", "npu-stack-exporter") != nil; got != want {
				t.Errorf("%s: ServiceMonitor rendered=%v, want %v", variants()[i].name, got, want)
			}
		}
	})
	t.Run("job mode names the rollout by the driver spec", func(t *testing.T) {
		jobName := func(extra map[string]any) string {
			vals := map[string]any{"hooks": map[string]any{"mode": "job"}}
			maps.Copy(vals, extra)
			r := mustRender(t, variant{name: "job", vals: vals})
			for _, j := range r.ofKind("Job") {
				if strings.HasPrefix(j.GetName(), "npu-stack-rollout") {
					if h := j.GetAnnotations()["helm.sh/hook"]; h != "" {
						t.Errorf("job-mode rollout is a hook (%s)", h)
					}
					if _, ok := j.Object["spec"].(map[string]any)["ttlSecondsAfterFinished"]; ok {
						t.Error("job-mode rollout has a TTL: GitOps would recreate it")
					}
					return j.GetName()
				}
			}
			t.Fatal("no rollout Job in job mode")
			return ""
		}
		base := jobName(nil)
		if !strings.HasPrefix(base, "npu-stack-rollout-") || len(base) <= len("npu-stack-rollout-") {
			t.Fatalf("job-mode rollout name %q has no hash", base)
		}
		if other := jobName(map[string]any{"driver": map[string]any{"version": "25.6.0"}}); other == base {
			t.Error("a new driver version keeps the job-mode rollout name")
		}
		if same := jobName(map[string]any{"devicePlugin": map[string]any{"image": map[string]any{"repository": "x/plugin", "tag": "v7"}}}); same != base {
			t.Error("a device-plugin change renamed the rollout Job")
		}
	})
	t.Run("auto mode reaches the rollout and the rebooter", func(t *testing.T) {
		r := mustRender(t, variants()[7])
		roll := strs(podSpec(t, r.find("Job", "npu-stack-rollout"))["containers"].([]any)[0].(map[string]any)["args"])
		reb := strs(containers(t, r.find("DaemonSet", "npu-stack-rebooter"), "containers")["rebooter"]["args"])
		if !hasArg(roll, "--auto-upgrade=true") || !hasArg(reb, "--auto-upgrade=true") || !hasArg(reb, "--auto-recover=true") {
			t.Errorf("auto mode: rollout %q rebooter %q", roll, reb)
		}
		if strings.Contains(r.notes, "approve-reboot") {
			t.Error("NOTES ask for approvals in auto mode")
		}
	})
	t.Run("sysrq, pull secrets, namespace and reroll targets", func(t *testing.T) {
		r := mustRender(t, variants()[8])
		rb := r.find("DaemonSet", "npu-stack-rebooter")
		c := containers(t, rb, "containers")["rebooter"]
		if sc := c["securityContext"].(map[string]any); sc["privileged"] != true {
			t.Error("sysrq needs a privileged rebooter")
		}
		if args := strs(c["args"]); !hasArg(args, "--method=sysrq") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--dbus-socket") }) {
			t.Errorf("sysrq rebooter args %q: want --method=sysrq and no --dbus-socket", args)
		}
		if vols, ok := podSpec(t, rb)["volumes"]; ok {
			t.Errorf("sysrq rebooter mounts %v; it needs no host socket", vols)
		}
		if _, ok := podSpec(t, rb)["hostPID"]; ok {
			t.Error("sysrq rebooter sets hostPID")
		}
		if r.find("Namespace", "npu-operator") == nil {
			t.Error("createNamespace rendered no Namespace")
		}
		pre := r.find("Job", "npu-stack-preflight")
		vols, _ := podSpec(t, pre)["volumes"].([]any)
		if len(vols) != 1 || vols[0].(map[string]any)["secret"].(map[string]any)["secretName"] != "regcred" {
			t.Errorf("preflight does not mount the pull secret: %v", vols)
		}
		for _, ds := range r.ofKind("DaemonSet") {
			ps, _ := podSpec(t, ds)["imagePullSecrets"].([]any)
			if len(ps) != 1 {
				t.Errorf("%s lacks the pull secret", ds.GetName())
			}
		}
		roll := strs(podSpec(t, r.find("Job", "npu-stack-rollout"))["containers"].([]any)[0].(map[string]any)["args"])
		if !hasArg(roll, "--reroll=dra/npu-dra-plugin") || !hasArg(roll, "--reroll=dra/selector:app=x") {
			t.Errorf("reroll targets missing from %q", roll)
		}
	})
}

// A chart change that leaves the driver alone must not touch the driver
// DaemonSets: any change there would replace every driver pod.
func TestNonDriverChangeLeavesDriverDaemonSetUntouched(t *testing.T) {
	base := mustRender(t, variant{name: "defaults"})
	changed := mustRender(t, variant{name: "other", vals: map[string]any{
		"devicePlugin":   map[string]any{"image": map[string]any{"repository": "x/plugin", "tag": "v7"}},
		"exporter":       map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}},
		"commonLabels":   map[string]any{"team": "ml"},
		"rebooter":       map[string]any{"slots": 3},
		"healthWatch":    map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "64Mi"}}},
		"recoveryPolicy": map[string]any{"autoRecover": true},
	}})
	a := nested[map[string]any](t, base.find("DaemonSet", "npu-stack-driver-910b"), "spec", "template")
	b := nested[map[string]any](t, changed.find("DaemonSet", "npu-stack-driver-910b"), "spec", "template")
	if !reflect.DeepEqual(a, b) {
		t.Error("a chart change that leaves the driver alone changed the driver pod template")
	}
	upgraded := mustRender(t, variant{name: "upgrade", vals: map[string]any{"driver": map[string]any{"version": "25.6.0"}}})
	if reflect.DeepEqual(a, nested[map[string]any](t, upgraded.find("DaemonSet", "npu-stack-driver-910b"), "spec", "template")) {
		t.Error("a driver version change left the driver pod template as it was")
	}
	// Only the driver DaemonSets may roll on a driver change: a new
	// device-plugin pod would wait for a driver that only the
	// post-upgrade rollout loads, which deadlocks helm --wait, Flux's and
	// Helm 4's kstatus waits and Argo CD's health checks.
	for _, ds := range base.ofKind("DaemonSet") {
		if strings.Contains(ds.GetName(), "-driver-") {
			continue
		}
		if !reflect.DeepEqual(nested[map[string]any](t, ds, "spec", "template"), nested[map[string]any](t, upgraded.find("DaemonSet", ds.GetName()), "spec", "template")) {
			t.Errorf("DaemonSet %s's pod template changes with driver.version", ds.GetName())
		}
	}
}
