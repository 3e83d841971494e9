package chart_test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// mixedFleet is a fleet whose KubeOS nodes keep the driver in
// /var/lib/Ascend/driver (read-only /usr) next to Ubuntu nodes with the
// upstream default /usr/local/Ascend/driver; the openEuler profiles carry
// NFD's whole kernel release as kernel and the image tag's form as
// imageKernel.
var mixedFleet = map[string]any{
	"nodeFeatureRule": map[string]any{"enabled": true},
	"rebooter":        map[string]any{"fallbackMethod": "sysrq"},
	"driver": map[string]any{"profiles": []any{
		map[string]any{"name": "910b-ubuntu", "chip": "910b", "kernel": "5.15.0-105-generic", "os": "ubuntu22.04"},
		map[string]any{"name": "910b-kubeos", "chip": "910b", "kernel": "6.6.0-145.0.4.135.oe2403sp3.aarch64", "imageKernel": "6.6.0-145.0.4.135",
			"os": "oe2403sp3", "hostDriverPath": "/var/lib/Ascend/driver"},
		map[string]any{"name": "310p-kubeos", "chip": "310p", "kernel": "6.6.0-145.0.4.135.oe2403sp3.aarch64", "imageKernel": "6.6.0-145.0.4.135",
			"os": "oe2403sp3", "hostDriverPath": "/var/lib/Ascend/driver", "nodeSelector": map[string]any{"pool": "inference"}},
	}},
}

// hostMount is one container mount resolved to its volume.
type hostMount struct {
	hostPath, hostType string // hostPath volume, "" otherwise
	readOnly           bool
	propagation        string
}

func mountsOf(t *testing.T, o *unstructured.Unstructured, c map[string]any) map[string]hostMount {
	t.Helper()
	vols := map[string]map[string]any{}
	list, _ := podSpec(t, o)["volumes"].([]any)
	for _, v := range list {
		m := v.(map[string]any)
		vols[m["name"].(string)] = m
	}
	out := map[string]hostMount{}
	ms, _ := c["volumeMounts"].([]any)
	for _, mi := range ms {
		m := mi.(map[string]any)
		vol, ok := vols[m["name"].(string)]
		if !ok {
			t.Fatalf("%s %s container %s mounts volume %v, which the pod does not have", o.GetKind(), o.GetName(), c["name"], m["name"])
		}
		hm := hostMount{readOnly: m["readOnly"] == true}
		hm.propagation, _ = m["mountPropagation"].(string)
		if hp, ok := vol["hostPath"].(map[string]any); ok {
			hm.hostPath, _ = hp["path"].(string)
			hm.hostType, _ = hp["type"].(string)
		}
		out[m["mountPath"].(string)] = hm
	}
	return out
}

// runsAsRoot reports whether the container's user is set to uid 0, by the
// container or the pod.
func runsAsRoot(spec, c map[string]any) bool {
	for _, sc := range []any{c["securityContext"], spec["securityContext"]} {
		if m, ok := sc.(map[string]any); ok {
			if u, ok := m["runAsUser"]; ok {
				return fmt.Sprint(u) == "0"
			}
		}
	}
	return false
}

// Every container that writes a host path or opens a device runs as uid 0,
// said explicitly: the host directories npu-stack writes (/run/npu-stack,
// /var/run/cdi, the driver tree) are root's with mode 0755, /dev/davinci*
// is 0660 (docs/host-contract.md, "Device nodes"), and privileged gives a
// non-root process no effective capabilities. An image's own user (the
// health-watch image runs as 65532) must not decide it.
func TestContainersTouchingTheHostRunAsRoot(t *testing.T) {
	for _, v := range append(variants(), variant{name: "mixed-fleet", vals: mixedFleet}) {
		r := mustRender(t, v)
		for _, kind := range []string{"DaemonSet", "Job", "CronJob"} {
			for _, o := range r.ofKind(kind) {
				spec := podSpec(t, o)
				for _, field := range []string{"initContainers", "containers"} {
					for name, c := range containers(t, o, field) {
						var why []string
						if sc, _ := c["securityContext"].(map[string]any); sc["privileged"] == true {
							why = append(why, "is privileged")
						}
						for path, m := range mountsOf(t, o, c) {
							switch {
							case m.hostPath == "/" || m.hostPath == "/dev":
								why = append(why, fmt.Sprintf("reaches the host's devices through %s at %s", m.hostPath, path))
							case m.hostPath != "" && !m.readOnly:
								why = append(why, fmt.Sprintf("writes host path %s at %s", m.hostPath, path))
							}
						}
						if len(why) > 0 && !runsAsRoot(spec, c) {
							slices.Sort(why)
							t.Errorf("%s: %s %s container %s %s, but does not set runAsUser: 0", v.name, kind, o.GetName(), name, strings.Join(why, ", "))
						}
					}
				}
			}
		}
	}
}

// healthwatchCommand is the subcommand an npu-healthwatch container runs.
func healthwatchCommand(c map[string]any) (string, []string) {
	args := strs(c["args"])
	if cmd := strs(c["command"]); len(cmd) > 1 {
		args = append(cmd[1:], args...)
	}
	if len(args) == 0 {
		return "", nil
	}
	if args[0] == "cdi" && len(args) > 1 {
		return "cdi " + args[1], args
	}
	return args[0], args
}

// Our containers that run npu-smi or read the host (the health-watch, the
// device plugin's gate, the CDI generator) see the host's / at /host,
// read-only with host mounts propagated, and are told so with
// --host-root=/host: npu-smi (a glibc binary of the host, linked against
// the driver's libraries) runs chrooted there, and every host path flag
// resolves under it. What they write of the host is mounted at
// /host<host path>, so the same path works.
func TestHostReadersSeeTheHostRoot(t *testing.T) {
	want := map[string]bool{"watch": true, "validate": true, "cdi generate": true}
	for _, v := range append(variants(), variant{name: "mixed-fleet", vals: mixedFleet}) {
		r := mustRender(t, v)
		seen := map[string]bool{}
		for _, o := range r.ofKind("DaemonSet") {
			for _, field := range []string{"initContainers", "containers"} {
				for name, c := range containers(t, o, field) {
					sub, args := healthwatchCommand(c)
					if binaryOf(c) != "npu-healthwatch" || !want[sub] || hasArg(args, "--marker-only") {
						continue
					}
					seen[sub] = true
					where := fmt.Sprintf("%s: %s container %s (%s)", v.name, o.GetName(), name, sub)
					if !hasArg(args, "--host-root=/host") {
						t.Errorf("%s lacks --host-root=/host: %q", where, args)
					}
					mounts := mountsOf(t, o, c)
					root := mounts["/host"]
					if root.hostPath != "/" || root.hostType != "Directory" || !root.readOnly || root.propagation != "HostToContainer" {
						t.Errorf("%s: /host is %+v, want the host's / (type Directory) read-only with HostToContainer propagation", where, root)
					}
					for path, m := range mounts {
						if path != "/host" && m.hostPath != "" && path != "/host"+m.hostPath {
							t.Errorf("%s mounts host path %s at %s; under --host-root=/host it must be at /host%s", where, m.hostPath, path, m.hostPath)
						}
					}
				}
			}
		}
		for sub := range want {
			if !seen[sub] && (sub != "watch" || v.name != "driver-disabled") {
				t.Errorf("%s: no npu-healthwatch %s container found", v.name, sub)
			}
		}
	}
}

// upstreamMount is a mount of an upstream MindCluster v7.3.0 manifest
// (component/ascend-device-plugin/build/ascendplugin-910.yaml,
// component/npu-exporter/build/npu-exporter.yaml).
type upstreamMount struct {
	path, hostPath string
	readOnly       bool
}

// The vendor device plugin and exporter start as upstream starts them: the
// device-plugin image has no ENTRYPOINT and the exporter's CMD takes no
// arguments, so each gets its binary as command, under upstream's umask
// 027 (umaskCommand); they get upstream's
// mounts (the driver at /usr/local/Ascend/driver inside the container,
// whatever the host path), env and security context.
func TestVendorContainersStartAsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		// paths: DaemonSet name suffix → host driver tree
		paths map[string]string
	}{
		{name: "defaults", paths: map[string]string{"": "/usr/local/Ascend/driver"}},
		{name: "passthrough", vals: map[string]any{"driver": map[string]any{"enabled": false, "hostDriverPath": "/var/lib/Ascend/driver"}},
			paths: map[string]string{"": "/var/lib/Ascend/driver"}},
		{name: "mixed-fleet", vals: mixedFleet, paths: map[string]string{"": "/usr/local/Ascend/driver", "-910b-kubeos": "/var/lib/Ascend/driver"}},
		{name: "no-inject", vals: map[string]any{"cdi": map[string]any{"inject": false}}, paths: map[string]string{"": "/usr/local/Ascend/driver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, variant{name: tc.name, vals: tc.vals})
			for suffix, driverPath := range tc.paths {
				dp := r.find("DaemonSet", "npu-stack-device-plugin"+suffix)
				if dp == nil {
					t.Fatalf("no DaemonSet npu-stack-device-plugin%s (have %v)", suffix, r.names("DaemonSet"))
				}
				c := containers(t, dp, "containers")["device-plugin"]
				// cdi.inject (the default): the command first waits for the
				// NRI injector.
				// Its startup and liveness probes tie it to the injector.
				wantCmd := []string{"/bin/bash", "-c", `/opt/npu-stack/bin/npu-healthwatch nri-ready --wait --marker-dir='/run/npu-stack' && umask 027 && exec "$0" "$@"`, "/usr/local/bin/device-plugin"}
				probe := "[/opt/npu-stack/bin/npu-healthwatch nri-ready --marker-dir=/run/npu-stack]"
				if tc.name == "no-inject" {
					wantCmd, probe = umaskCommand("/usr/local/bin/device-plugin"), "[]"
				}
				for _, p := range []string{"startupProbe", "livenessProbe"} {
					pr, _ := c[p].(map[string]any)
					ex, _ := pr["exec"].(map[string]any)
					if got := fmt.Sprint(strs(ex["command"])); got != probe {
						t.Errorf("%s: device plugin %s %s, want %s", dp.GetName(), p, got, probe)
					}
				}
				if cmd := strs(c["command"]); !slices.Equal(cmd, wantCmd) {
					t.Errorf("%s: device plugin command %q, want its binary (the image has no ENTRYPOINT) under umask 027", dp.GetName(), cmd)
				}
				if args := strs(c["args"]); !hasArg(args, "-logFile=/var/log/mindx-dl/devicePlugin/devicePlugin.log") || !hasArg(args, "-logLevel=0") {
					t.Errorf("%s: device plugin args %q lack upstream's -logFile and -logLevel", dp.GetName(), args)
				}
				checkEnv(t, dp.GetName(), c, "NODE_NAME", "spec.nodeName")
				checkEnv(t, dp.GetName(), c, "HOST_IP", "status.hostIP")
				checkMounts(t, dp, c, []upstreamMount{
					{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins", false},
					{"/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pod-resources", false},
					{"/usr/local/Ascend/driver", driverPath, true},
					{"/var/log/mindx-dl/devicePlugin", "/var/log/mindx-dl/devicePlugin", false},
					{"/var/log/lingqu", "/var/log/lingqu", false},
					{"/user/cluster-info/datatrace-config", "/user/cluster-info/datatrace-config", false},
					{"/tmp", "/tmp", false},
					{"/etc/localtime", "/etc/localtime", true},
				})
				checkUpstreamSecurity(t, dp.GetName(), c)
				checkMemoryLimit(t, dp.GetName(), c, "500Mi")

				ex := r.find("DaemonSet", "npu-stack-exporter"+suffix)
				if ex == nil {
					t.Fatalf("no DaemonSet npu-stack-exporter%s (have %v)", suffix, r.names("DaemonSet"))
				}
				e := containers(t, ex, "containers")["exporter"]
				if cmd := strs(e["command"]); !slices.Equal(cmd, umaskCommand("/usr/local/bin/npu-exporter")) {
					t.Errorf("%s: exporter command %q, want its binary (the image's CMD takes no arguments) under umask 027", ex.GetName(), cmd)
				}
				for _, a := range []string{"-port=8082", "-ip=0.0.0.0", "-containerMode=containerd", "-logFile=/var/log/mindx-dl/npu-exporter/npu-exporter.log", "-updateTime=5"} {
					if !hasArg(strs(e["args"]), a) {
						t.Errorf("%s: exporter args %q lack %s", ex.GetName(), strs(e["args"]), a)
					}
				}
				want := []upstreamMount{
					{"/var/log/mindx-dl/npu-exporter", "/var/log/mindx-dl/npu-exporter", false},
					{"/etc/localtime", "/etc/localtime", true},
					{"/usr/local/Ascend/driver", driverPath, true},
					{"/run/containerd", "/run/containerd", true},
					{"/tmp", "/tmp", false},
				}
				if driverPath == "/usr/local/Ascend/driver" {
					want = append(want, upstreamMount{"/usr/local/dcmi", "/usr/local/dcmi", true})
				}
				checkMounts(t, ex, e, want)
				checkUpstreamSecurity(t, ex.GetName(), e)
				checkMemoryLimit(t, ex.GetName(), e, "1000Mi")
				if podSpec(t, ex)["automountServiceAccountToken"] != false {
					t.Errorf("%s mounts a service account token; the exporter never calls the API", ex.GetName())
				}
			}
		})
	}
}

// umaskCommand runs binary, with the container's args, as upstream
// does under umask 027 (MindCluster v7.3.0 npu-exporter.yaml `umask
// 027;npu-exporter ...`; the Dockerfiles' /etc/profile): the vendor
// image's bash sets the umask and execs it with the args as "$@", which
// no shell parses. tests/realnode reads the running processes' umask.
func umaskCommand(binary string) []string {
	return []string{"/bin/bash", "-c", `umask 027; exec "$0" "$@"`, binary}
}

func checkEnv(t *testing.T, where string, c map[string]any, name, field string) {
	t.Helper()
	env, _ := c["env"].([]any)
	for _, e := range env {
		m := e.(map[string]any)
		if m["name"] != name {
			continue
		}
		ref, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
		if ref != field {
			t.Errorf("%s: env %s from %q, want %s", where, name, ref, field)
		}
		return
	}
	t.Errorf("%s: no env %s (downward API %s)", where, name, field)
}

func checkMounts(t *testing.T, o *unstructured.Unstructured, c map[string]any, want []upstreamMount) {
	t.Helper()
	got := mountsOf(t, o, c)
	for _, w := range want {
		m, ok := got[w.path]
		if !ok {
			t.Errorf("%s container %s does not mount %s (upstream does)", o.GetName(), c["name"], w.path)
			continue
		}
		if m.hostPath != w.hostPath || m.readOnly != w.readOnly {
			t.Errorf("%s container %s: %s is host path %q read-only %v, want %q read-only %v", o.GetName(), c["name"], w.path, m.hostPath, m.readOnly, w.hostPath, w.readOnly)
		}
	}
}

// checkMemoryLimit: the vendor binaries get upstream's memory limit
// (MindCluster v7.3.0 ascendplugin-910.yaml 500Mi, npu-exporter.yaml
// 1000Mi), not a smaller one of our own.
func checkMemoryLimit(t *testing.T, where string, c map[string]any, want string) {
	t.Helper()
	got, _, _ := unstructured.NestedString(c, "resources", "limits", "memory")
	if got != want {
		t.Errorf("%s: memory limit %q, want upstream's %s", where, got, want)
	}
}

func checkUpstreamSecurity(t *testing.T, where string, c map[string]any) {
	t.Helper()
	sc, _ := c["securityContext"].(map[string]any)
	if sc["privileged"] != true || sc["readOnlyRootFilesystem"] != true || fmt.Sprint(sc["runAsUser"]) != "0" {
		t.Errorf("%s: security context %v, want upstream's privileged, read-only root, root", where, sc)
	}
}

// A fleet whose profiles keep the driver in different host directories
// gets one device plugin and one exporter per directory, each scheduled
// on its profiles' nodes only; each driver pod's health-watch names the
// device plugin of its own group, and the rollout re-rolls them all.
func TestEachDriverPathGetsItsOwnDevicePlugin(t *testing.T) {
	r := mustRender(t, variant{name: "mixed-fleet", vals: mixedFleet})
	wantDS := []string{"npu-stack-device-plugin", "npu-stack-device-plugin-910b-kubeos", "npu-stack-driver-310p-kubeos", "npu-stack-driver-910b-kubeos",
		"npu-stack-driver-910b-ubuntu", "npu-stack-exporter", "npu-stack-exporter-910b-kubeos", "npu-stack-nri-injector", "npu-stack-nri-injector-910b-kubeos", "npu-stack-rebooter"}
	if got := r.names("DaemonSet"); !slices.Equal(got, wantDS) {
		t.Fatalf("DaemonSets %v, want %v", got, wantDS)
	}
	terms := func(o *unstructured.Unstructured) []map[string]string {
		list, _, _ := unstructured.NestedSlice(podSpec(t, o), "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		var out []map[string]string
		for _, term := range list {
			sel := map[string]string{}
			exprs, _ := term.(map[string]any)["matchExpressions"].([]any)
			for _, e := range exprs {
				m := e.(map[string]any)
				if m["operator"] != "In" || len(strs(m["values"])) != 1 {
					t.Fatalf("%s: node affinity expression %v", o.GetName(), m)
				}
				sel[m["key"].(string)] = strs(m["values"])[0]
			}
			out = append(out, sel)
		}
		return out
	}
	ubuntu := map[string]string{"openfuyao.com/npu.chip": "910b", "feature.node.kubernetes.io/kernel-version.full": "5.15.0-105-generic", "openfuyao.com/npu.os": "ubuntu22.04"}
	kubeos910 := map[string]string{"openfuyao.com/npu.chip": "910b", "feature.node.kubernetes.io/kernel-version.full": "6.6.0-145.0.4.135.oe2403sp3.aarch64", "openfuyao.com/npu.os": "oe2403sp3"}
	kubeos310 := map[string]string{"openfuyao.com/npu.chip": "310p", "feature.node.kubernetes.io/kernel-version.full": "6.6.0-145.0.4.135.oe2403sp3.aarch64", "openfuyao.com/npu.os": "oe2403sp3", "pool": "inference"}
	for name, want := range map[string][]map[string]string{
		"npu-stack-device-plugin": {ubuntu}, "npu-stack-exporter": {ubuntu},
		"npu-stack-device-plugin-910b-kubeos": {kubeos910, kubeos310}, "npu-stack-exporter-910b-kubeos": {kubeos910, kubeos310},
	} {
		o := r.find("DaemonSet", name)
		if got := terms(o); !reflect.DeepEqual(got, want) {
			t.Errorf("%s node affinity terms %v, want %v", name, got, want)
		}
		if sel := podSpec(t, o)["nodeSelector"]; !reflect.DeepEqual(sel, map[string]any{"openfuyao.com/npu.present": "true"}) {
			t.Errorf("%s nodeSelector %v, want the NPU nodes", name, sel)
		}
	}
	for drv, plugin := range map[string]string{
		"npu-stack-driver-910b-ubuntu": "npu-stack-device-plugin", "npu-stack-driver-910b-kubeos": "npu-stack-device-plugin-910b-kubeos",
		"npu-stack-driver-310p-kubeos": "npu-stack-device-plugin-910b-kubeos",
	} {
		checkPluginSelector(t, r, drv, plugin)
	}
	rollArgs := strs(podSpec(t, r.find("Job", "npu-stack-rollout"))["containers"].([]any)[0].(map[string]any)["args"])
	for _, ds := range []string{"npu-stack-device-plugin", "npu-stack-exporter", "npu-stack-device-plugin-910b-kubeos", "npu-stack-exporter-910b-kubeos"} {
		if !hasArg(rollArgs, "--reroll=npu-operator/"+ds) {
			t.Errorf("rollout does not re-roll %s: %q", ds, rollArgs)
		}
	}
	// One Service still selects the exporters of every group.
	svc := nested[map[string]any](t, r.find("Service", "npu-stack-exporter"), "spec", "selector")
	for _, name := range []string{"npu-stack-exporter", "npu-stack-exporter-910b-kubeos"} {
		podLabels := nested[map[string]any](t, r.find("DaemonSet", name), "spec", "template", "metadata", "labels")
		for k, v := range svc {
			if podLabels[k] != v {
				t.Errorf("exporter Service selector %v does not select the pods of %s (%v)", svc, name, podLabels)
			}
		}
	}
}

// checkPluginSelector: the driver pod's health-watch gets the label
// selector of exactly the device-plugin DaemonSet serving its node, and
// the namespace of that DaemonSet in env POD_NAMESPACE.
func checkPluginSelector(t *testing.T, r *rendered, driverDS, pluginDS string) {
	t.Helper()
	watch := containers(t, r.find("DaemonSet", driverDS), "containers")["watch"]
	var sel string
	for _, a := range strs(watch["args"]) {
		if s, ok := strings.CutPrefix(a, "--device-plugin-selector="); ok {
			sel = s
		}
	}
	parsed, err := labels.Parse(sel)
	if err != nil || sel == "" {
		t.Fatalf("%s watch: --device-plugin-selector %q: %v", driverDS, sel, err)
	}
	for _, o := range r.ofKind("DaemonSet") {
		podLabels := labels.Set{}
		for k, v := range nested[map[string]any](t, o, "spec", "template", "metadata", "labels") {
			podLabels[k] = fmt.Sprint(v)
		}
		if got, want := parsed.Matches(podLabels), o.GetName() == pluginDS; got != want {
			t.Errorf("%s watch: --device-plugin-selector %q matches the pods of %s: %v, want %v", driverDS, sel, o.GetName(), got, want)
		}
	}
	checkEnv(t, driverDS+" watch", watch, "POD_NAMESPACE", "metadata.namespace")
}

// The wedge reaches the scheduler: with the default values the watch of
// every driver pod deletes its node's device-plugin pod on a wedge; with
// the device plugin off it gets no selector (its account still lists and
// deletes pods in the namespace: driver entry stops the exporter's pods
// before an install over a loaded driver, TestDriverMayStopPodsInEachTargetNamespace).
func TestWatchNamesTheDevicePlugin(t *testing.T) {
	r := mustRender(t, variant{name: "defaults"})
	checkPluginSelector(t, r, "npu-stack-driver-910b", "npu-stack-device-plugin")
	off := mustRender(t, variant{name: "no-plugin", vals: map[string]any{"devicePlugin": map[string]any{"enabled": false}}})
	for _, a := range strs(containers(t, off.find("DaemonSet", "npu-stack-driver-910b"), "containers")["watch"]["args"]) {
		if strings.HasPrefix(a, "--device-plugin-selector") {
			t.Errorf("device plugin disabled, yet the watch gets %s", a)
		}
	}
	for _, role := range r.ofKind("Role") {
		if role.GetLabels()["app.kubernetes.io/component"] == "driver" {
			if !ruleAllows(role, "", "pods", "delete") || !ruleAllows(role, "", "pods", "list") || role.GetNamespace() != "npu-operator" {
				t.Errorf("driver Role %s/%s %v: want list and delete pods in npu-operator", role.GetNamespace(), role.GetName(), role.Object["rules"])
			}
			return
		}
	}
	t.Error("no Role lets the driver pod delete its node's device-plugin pod")
}

// The profile's kernel is the node label's value (NFD's whole release);
// imageKernel, when set, is the image tag's kernel part: the DaemonSet
// selects on the one and pulls the other, and preflight gets both right.
func TestProfileImageKernel(t *testing.T) {
	r := mustRender(t, variant{name: "mixed-fleet", vals: mixedFleet})
	drv := r.find("DaemonSet", "npu-stack-driver-910b-kubeos")
	if got := podSpec(t, drv)["nodeSelector"].(map[string]any)["feature.node.kubernetes.io/kernel-version.full"]; got != "6.6.0-145.0.4.135.oe2403sp3.aarch64" {
		t.Errorf("driver nodeSelector kernel %v, want the whole release", got)
	}
	if img := containers(t, drv, "containers")["driver"]["image"]; img != "docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-6.6.0-145.0.4.135-oe2403sp3" {
		t.Errorf("driver image %v, want the tag with imageKernel", img)
	}
	pre := strs(podSpec(t, r.find("Job", "npu-stack-preflight"))["containers"].([]any)[0].(map[string]any)["args"])
	want := `--profile={"chip":"910b","image":"docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-6.6.0-145.0.4.135-oe2403sp3","installMode":"run","kernel":"6.6.0-145.0.4.135.oe2403sp3.aarch64","name":"910b-kubeos","nodeSelector":{},"os":"oe2403sp3"}`
	if !hasArg(pre, want) {
		t.Errorf("preflight args %q lack %s", pre, want)
	}
	tmpl := mustRender(t, variant{name: "template", vals: map[string]any{"driver": map[string]any{
		"tagTemplate": "{{ .version }}-{{ .chip }}-{{ .nodeKernel }}",
		"profiles":    []any{map[string]any{"name": "a", "chip": "910b", "kernel": "6.6.0-1.oe2403sp3.aarch64", "imageKernel": "6.6.0-1", "os": "oe2403sp3"}},
	}}})
	if img := containers(t, tmpl.find("DaemonSet", "npu-stack-driver-a"), "containers")["driver"]["image"]; img != "docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-6.6.0-1.oe2403sp3.aarch64" {
		t.Errorf("tagTemplate with .nodeKernel gave %v", img)
	}
}

// The rebooter reaches D-Bus through the host's /run/dbus directory (a
// bind-mounted socket file goes stale when dbus restarts), with the
// AppArmor profile and SELinux type of its values, and gets the retry,
// fallback and drain-bound flags.
func TestRebooterValues(t *testing.T) {
	for _, tc := range []struct {
		name       string
		vals       map[string]any
		privileged bool
		appArmor   map[string]any
		seLinux    map[string]any
		args       []string
	}{
		{name: "defaults", appArmor: map[string]any{"type": "Unconfined"}, seLinux: map[string]any{"type": "spc_t"},
			args: []string{"--reboot-attempts=3", "--fallback-method=none", "--recovery-drain-timeout=300s", "--dbus-socket=/run/dbus/system_bus_socket"}},
		{name: "sysrq fallback", privileged: true,
			vals: map[string]any{"rebooter": map[string]any{"fallbackMethod": "sysrq", "rebootAttempts": 5, "appArmorProfile": map[string]any{"type": "Localhost", "localhostProfile": "npu-rebooter"}, "seLinuxOptions": nil},
				"recoveryPolicy": map[string]any{"drainTimeoutSeconds": 60}},
			appArmor: map[string]any{"type": "Localhost", "localhostProfile": "npu-rebooter"},
			args:     []string{"--reboot-attempts=5", "--fallback-method=sysrq", "--recovery-drain-timeout=60s", "--dbus-socket=/run/dbus/system_bus_socket"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rb := mustRender(t, variant{name: tc.name, vals: tc.vals}).find("DaemonSet", "npu-stack-rebooter")
			c := containers(t, rb, "containers")["rebooter"]
			for _, a := range tc.args {
				if !hasArg(strs(c["args"]), a) {
					t.Errorf("rebooter args %q lack %s", strs(c["args"]), a)
				}
			}
			sc := c["securityContext"].(map[string]any)
			if (sc["privileged"] == true) != tc.privileged {
				t.Errorf("rebooter privileged %v, want %v", sc["privileged"], tc.privileged)
			}
			got, _ := sc["appArmorProfile"].(map[string]any)
			if !reflect.DeepEqual(got, tc.appArmor) {
				t.Errorf("rebooter appArmorProfile %v, want %v", got, tc.appArmor)
			}
			gotSE, _ := sc["seLinuxOptions"].(map[string]any)
			if !reflect.DeepEqual(gotSE, tc.seLinux) {
				t.Errorf("rebooter seLinuxOptions %v, want %v", gotSE, tc.seLinux)
			}
			mounts := mountsOf(t, rb, c)
			if m := mounts["/run/dbus"]; m.hostPath != "/run/dbus" || m.hostType != "Directory" || !m.readOnly || len(mounts) != 1 {
				t.Errorf("rebooter mounts %+v, want only the host directory /run/dbus (type Directory) read-only at /run/dbus", mounts)
			}
		})
	}
}

// The NodeFeatureRule (off by default) sets exactly the labels the chart
// selects on: npuNodeSelector's, and profileLabels' chip and os, from
// Huawei's PCI devices, the kernel release and os-release.
func TestNodeFeatureRuleSetsTheSelectedLabels(t *testing.T) {
	if got := mustRender(t, variant{name: "defaults"}).ofKind("NodeFeatureRule"); len(got) != 0 {
		t.Fatalf("NodeFeatureRule rendered by default: %v", got)
	}
	vals := map[string]any{
		"nodeFeatureRule": map[string]any{"enabled": true, "chips": []any{map[string]any{"chip": "910b", "device": "d802"}, map[string]any{"chip": "a3", "device": "d803"}},
			"oses": []any{map[string]any{"os": "oe2403sp3", "kernelRegexp": `\.oe2403sp3\.`}, map[string]any{"os": "ubuntu22.04", "osReleaseID": "ubuntu", "osReleaseVersionID": "22.04"}}},
		"npuNodeSelector": map[string]any{"accelerator": "huawei-Ascend910", "openfuyao.com/npu.present": nil},
		"driver":          map[string]any{"profileLabels": map[string]any{"chip": "example.com/chip", "kernel": "feature.node.kubernetes.io/kernel-version.full", "os": "example.com/os"}},
	}
	rules := nested[[]any](t, mustRender(t, variant{name: "nfr", vals: vals}).find("NodeFeatureRule", "npu-stack-npu"), "spec", "rules")
	type rule struct {
		labels   map[string]any
		features map[string]map[string]any // feature → attribute → {op, value}
	}
	got := map[string]rule{}
	for _, ri := range rules {
		m := ri.(map[string]any)
		r := rule{labels: m["labels"].(map[string]any), features: map[string]map[string]any{}}
		for _, f := range m["matchFeatures"].([]any) {
			fm := f.(map[string]any)
			r.features[fm["feature"].(string)] = fm["matchExpressions"].(map[string]any)
		}
		got[m["name"].(string)] = r
	}
	expr := func(op string, vals ...string) map[string]any {
		v := make([]any, len(vals))
		for i, s := range vals {
			v[i] = s
		}
		return map[string]any{"op": op, "value": v}
	}
	want := map[string]rule{
		"npu-stack chip 910b": {labels: map[string]any{"accelerator": "huawei-Ascend910", "example.com/chip": "910b"},
			features: map[string]map[string]any{"pci.device": {"vendor": expr("In", "19e5"), "device": expr("In", "d802")}}},
		"npu-stack chip a3": {labels: map[string]any{"accelerator": "huawei-Ascend910", "example.com/chip": "a3"},
			features: map[string]map[string]any{"pci.device": {"vendor": expr("In", "19e5"), "device": expr("In", "d803")}}},
		"npu-stack os oe2403sp3": {labels: map[string]any{"example.com/os": "oe2403sp3"},
			features: map[string]map[string]any{"pci.device": {"vendor": expr("In", "19e5"), "device": expr("In", "d802", "d803")},
				"kernel.version": {"full": expr("InRegexp", `\.oe2403sp3\.`)}}},
		"npu-stack os ubuntu22.04": {labels: map[string]any{"example.com/os": "ubuntu22.04"},
			features: map[string]map[string]any{"pci.device": {"vendor": expr("In", "19e5"), "device": expr("In", "d802", "d803")},
				"system.osrelease": {"ID": expr("In", "ubuntu"), "VERSION_ID": expr("In", "22.04")}}},
	}
	if !reflect.DeepEqual(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("rules %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for name, w := range want {
		if !reflect.DeepEqual(got[name], w) {
			t.Errorf("rule %q:\n got %v\nwant %v", name, got[name], w)
		}
	}
}

// TestWatchFindsNPUSMILibrariesInItsProfilesTree: npu-smi's libraries are
// in the driver tree of the watch's own profile (LD_LIBRARY_PATH, host
// contract), so on a KubeOS profile the watch is told /var/lib/Ascend/driver.
func TestWatchFindsNPUSMILibrariesInItsProfilesTree(t *testing.T) {
	r := mustRender(t, variant{name: "mixed-fleet", vals: mixedFleet})
	want := map[string]string{
		"npu-stack-driver-910b-ubuntu": "/usr/local/Ascend/driver",
		"npu-stack-driver-910b-kubeos": "/var/lib/Ascend/driver",
		"npu-stack-driver-310p-kubeos": "/var/lib/Ascend/driver",
	}
	for name, path := range want {
		ds := r.find("DaemonSet", name)
		if ds == nil {
			t.Fatalf("no DaemonSet %s", name)
		}
		containers, _, _ := unstructured.NestedSlice(podSpec(t, ds), "containers")
		found := false
		for _, c := range containers {
			c := c.(map[string]any)
			if c["name"] == "watch" {
				found = true
				if args := strs(c["args"]); !hasArg(args, "--driver-root="+path) {
					t.Errorf("%s: watch args %v, want --driver-root=%s", name, args, path)
				}
			}
		}
		if !found {
			t.Errorf("%s: no watch container", name)
		}
	}
}
