package chart_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// driverEntry splits the driver container's command of a driver DaemonSet
// into driver-entry's own flags (before "--") and the install command.
func driverEntry(t *testing.T, ds *unstructured.Unstructured) (flags, install []string) {
	t.Helper()
	cmd := strs(containers(t, ds, "containers")["driver"]["command"])
	sep := slices.Index(cmd, "--")
	if len(cmd) < 2 || cmd[1] != "driver-entry" || sep < 0 {
		t.Fatalf("%s: driver command %q is not npu-healthwatch driver-entry ... -- <install command>", ds.GetName(), cmd)
	}
	return cmd[:sep], cmd[sep+1:]
}

// flagValues are the values of every --name=value in args, in order.
func flagValues(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// findIn is the object of kind and name in namespace ns.
func (r *rendered) findIn(kind, ns, name string) *unstructured.Unstructured {
	for _, o := range r.ofKind(kind) {
		if o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

func driverDaemonSets(t *testing.T, r *rendered) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, ds := range r.ofKind("DaemonSet") {
		if ds.GetLabels()["app"] == "npu-driver-daemonset" {
			out = append(out, ds)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no driver DaemonSet among %v", r.names("DaemonSet"))
	}
	return out
}

// The install's bounds reach driver-entry and the pod: the installer's
// timeout, the retry backoff, and a grace period that lets a running
// install finish on SIGTERM; --force only when asked for, after the
// install command.
func TestDriverEntryInstallBounds(t *testing.T) {
	defaultInstall := []string{"/usr/local/Ascend/driver.run", "--full", "--quiet", "--install-for-all"}
	for _, tc := range []struct {
		name                         string
		driver                       map[string]any
		timeout, backoff, backoffMax string
		grace                        float64
		install                      []string
	}{
		{name: "defaults", timeout: "1200s", backoff: "30s", backoffMax: "600s", grace: 1260, install: defaultInstall},
		{name: "set", driver: map[string]any{"installTimeoutSeconds": 600, "terminationGracePeriodSeconds": 630,
			"installRetry": map[string]any{"initialSeconds": 5, "maxSeconds": 5}},
			timeout: "600s", backoff: "5s", backoffMax: "5s", grace: 630, install: defaultInstall},
		{name: "force", driver: map[string]any{"installForce": true, "installCommand": []any{"/opt/driver.run", "--full"}},
			timeout: "1200s", backoff: "30s", backoffMax: "600s", grace: 1260, install: []string{"/opt/driver.run", "--full", "--force"}},
		{name: "force off", driver: map[string]any{"installForce": false, "installCommand": []any{"/opt/driver.run", "--full"}},
			timeout: "1200s", backoff: "30s", backoffMax: "600s", grace: 1260, install: []string{"/opt/driver.run", "--full"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{}
			if tc.driver != nil {
				d := maps.Clone(tc.driver)
				d["profiles"] = mixedFleet["driver"].(map[string]any)["profiles"]
				vals["driver"] = d
			}
			for _, ds := range driverDaemonSets(t, mustRender(t, variant{name: tc.name, vals: vals})) {
				flags, install := driverEntry(t, ds)
				for name, want := range map[string]string{"install-timeout": tc.timeout, "retry-backoff": tc.backoff, "retry-backoff-max": tc.backoffMax} {
					if got := flagValues(flags, name); !slices.Equal(got, []string{want}) {
						t.Errorf("%s: driver-entry --%s %q, want once %q (flags %q)", ds.GetName(), name, got, want, flags)
					}
				}
				if !slices.Equal(install, tc.install) {
					t.Errorf("%s: install command %q, want %q", ds.GetName(), install, tc.install)
				}
				if g := nested[float64](t, ds, "spec", "template", "spec", "terminationGracePeriodSeconds"); g != tc.grace {
					t.Errorf("%s: terminationGracePeriodSeconds %v, want %v", ds.GetName(), g, tc.grace)
				}
			}
		})
	}
}

// A grace period shorter than the installer's timeout plus 30 s would let
// the kubelet kill a running install: refused naming both values and the
// fix. The boundary itself is accepted.
func TestGracePeriodMustCoverTheInstall(t *testing.T) {
	grace := func(timeout, grace int) map[string]any {
		return map[string]any{"driver": map[string]any{"installTimeoutSeconds": timeout, "terminationGracePeriodSeconds": grace}}
	}
	for _, tc := range []struct {
		vals map[string]any
		want string // "" = accepted
	}{
		{vals: grace(600, 629), want: "at least driver.installTimeoutSeconds (600) + 30 = 630"},
		{vals: grace(1200, 1229), want: "1230"},
		{vals: map[string]any{"driver": map[string]any{"installTimeoutSeconds": 1800}}, want: "driver.terminationGracePeriodSeconds (1260)"},
		// Refused also with the driver disabled: the values are wrong
		// whether or not they are used yet.
		{vals: map[string]any{"driver": map[string]any{"enabled": false, "terminationGracePeriodSeconds": 100}}, want: "1230"},
		{vals: grace(600, 630)},
		{vals: grace(60, 90)},
	} {
		_, err := render(t, tc.vals, renderOpts{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: refused, want accepted: %v", tc.vals, err)
		case tc.want == "":
		case err == nil:
			t.Errorf("%v: rendered; want it refused (%s)", tc.vals, tc.want)
		default:
			for _, w := range []string{tc.want, "driver.terminationGracePeriodSeconds", "driver.installTimeoutSeconds", "kills the driver container"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: the refusal must say %q:\n%v", tc.vals, w, err)
				}
			}
		}
	}
}

// The longest wait between install retries is not shorter than the first.
func TestInstallRetryMaxNotBelowInitial(t *testing.T) {
	retry := func(initial, max int) map[string]any {
		return map[string]any{"driver": map[string]any{"installRetry": map[string]any{"initialSeconds": initial, "maxSeconds": max}}}
	}
	_, err := render(t, retry(60, 59), renderOpts{})
	if err == nil {
		t.Fatal("installRetry maxSeconds 59 < initialSeconds 60 rendered; want it refused")
	}
	for _, w := range []string{"driver.installRetry.maxSeconds (59)", "driver.installRetry.initialSeconds (60)", "Set driver.installRetry.maxSeconds to 60 or more"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal must say %q:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
		t.Errorf("refused by the schema, want the chart's own message: %v", err)
	}
	for _, ok := range [][2]int{{60, 60}, {1, 1}, {1, 86400}} {
		if _, err := render(t, retry(ok[0], ok[1]), renderOpts{}); err != nil {
			t.Errorf("installRetry %v must be accepted: %v", ok, err)
		}
	}
}

// Before an install over a loaded driver, driver-entry deletes its node's
// pods of exactly the DaemonSets the rollout re-rolls: the chart's device
// plugin and exporter of every group (when enabled) and every
// rerollTargets entry, by name or selector.
func TestDriverEntryStopsWhatTheRolloutRerolls(t *testing.T) {
	targets := map[string]any{"upgradePolicy": map[string]any{"rerollTargets": []any{
		map[string]any{"namespace": "dra", "name": "npu-dra-plugin"},
		map[string]any{"namespace": "npu-operator", "selector": "app: holder #x"},
	}}}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want []string
	}{
		{name: "defaults", want: []string{"npu-operator/npu-stack-device-plugin", "npu-operator/npu-stack-exporter"}},
		{name: "targets", vals: map[string]any{"driver": targets}, want: []string{"npu-operator/npu-stack-device-plugin", "npu-operator/npu-stack-exporter",
			"dra/npu-dra-plugin", "npu-operator/selector:app: holder #x"}},
		{name: "mixed-fleet", vals: mixedFleet, want: []string{"npu-operator/npu-stack-device-plugin", "npu-operator/npu-stack-exporter",
			"npu-operator/npu-stack-device-plugin-910b-kubeos", "npu-operator/npu-stack-exporter-910b-kubeos"}},
		{name: "device plugin off", vals: map[string]any{"devicePlugin": map[string]any{"enabled": false}}, want: []string{"npu-operator/npu-stack-exporter"}},
		{name: "exporter off", vals: map[string]any{"exporter": map[string]any{"enabled": false}}, want: []string{"npu-operator/npu-stack-device-plugin"}},
		{name: "other release namespace", vals: map[string]any{"namespace": "accel"}, want: []string{"accel/npu-stack-device-plugin", "accel/npu-stack-exporter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, variant{name: tc.name, vals: tc.vals})
			roll := strs(containers(t, r.find("Job", "npu-stack-rollout"), "containers")["rollout"]["args"])
			if got := flagValues(roll, "reroll"); !slices.Equal(got, tc.want) {
				t.Errorf("rollout --reroll %q, want %q", got, tc.want)
			}
			for _, ds := range driverDaemonSets(t, r) {
				flags, install := driverEntry(t, ds)
				if got := flagValues(flags, "stop"); !slices.Equal(got, tc.want) {
					t.Errorf("%s: driver-entry --stop %q, want %q", ds.GetName(), got, tc.want)
				}
				if s := flagValues(install, "stop"); len(s) > 0 {
					t.Errorf("%s: --stop after \"--\" goes to the installer: %q", ds.GetName(), install)
				}
			}
		})
	}
}

// The exporter opens the chips too: its pods wait in the same
// wait-for-driver gate as the device plugin's (image, args, security
// context, the host's / read-only), with no API token.
func TestExporterWaitsForTheDriver(t *testing.T) {
	for _, v := range append(variants(), variant{name: "device plugin off", vals: map[string]any{"devicePlugin": map[string]any{"enabled": false}}}) {
		t.Run(v.name, func(t *testing.T) {
			r := mustRender(t, v)
			var exporters int
			for _, ex := range r.ofKind("DaemonSet") {
				comp := ex.GetLabels()["app.kubernetes.io/component"]
				if comp != "exporter" && !strings.HasPrefix(comp, "exporter-") {
					continue
				}
				exporters++
				inits := containers(t, ex, "initContainers")
				gate, ok := inits["wait-for-driver"]
				if !ok || len(inits) != 1 {
					t.Fatalf("%s: init containers %v, want wait-for-driver", ex.GetName(), slices.Collect(maps.Keys(inits)))
				}
				if dp := r.find("DaemonSet", strings.Replace(ex.GetName(), "-exporter", "-device-plugin", 1)); dp != nil {
					want := containers(t, dp, "initContainers")["wait-for-driver"]
					// With cdi.inject the device plugin's gate also waits
					// for the NRI injector; the exporter hands out no chip.
					dpArgs := strs(want["args"])
					if got, inject := hasArg(dpArgs, "--require-injector"), v.name != "no-inject"; got != inject {
						t.Errorf("%s: device plugin gate --require-injector %v, want %v: %q", dp.GetName(), got, inject, dpArgs)
					}
					want = maps.Clone(want)
					want["args"] = slices.DeleteFunc(slices.Clone(want["args"].([]any)), func(a any) bool { return a == "--require-injector" })
					if fmt.Sprint(gate) != fmt.Sprint(want) {
						t.Errorf("%s: wait-for-driver\n%v\ndiffers from the device plugin's\n%v", ex.GetName(), gate, want)
					}
				}
				args := strs(gate["args"])
				if sub, _ := healthwatchCommand(gate); sub != "validate" || !hasArg(args, "--wait") || !hasArg(args, "--host-root=/host") {
					t.Errorf("%s: gate args %q, want validate --wait --host-root=/host", ex.GetName(), args)
				}
				if got, want := hasArg(args, "--require-marker=false"), v.name == "driver-disabled"; got != want {
					t.Errorf("%s: --require-marker=false %v, want %v (only for a pre-installed driver): %q", ex.GetName(), got, want, args)
				}
				if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--driver-version") }) {
					t.Errorf("%s: gate pins a driver version (its pods would roll with driver.version): %q", ex.GetName(), args)
				}
				wantRoot := "/usr/local/Ascend/driver"
				if strings.HasSuffix(ex.GetName(), "kubeos") || v.name == "driver-disabled" {
					wantRoot = "/var/lib/Ascend/driver"
				}
				if !hasArg(args, "--driver-root="+wantRoot) {
					t.Errorf("%s: gate %q lacks --driver-root=%s (its group's tree)", ex.GetName(), args, wantRoot)
				}
				if root := mountsOf(t, ex, gate)["/host"]; root.hostPath != "/" || !root.readOnly {
					t.Errorf("%s: gate's /host %+v, want the host's / read-only", ex.GetName(), root)
				}
				if podSpec(t, ex)["automountServiceAccountToken"] != false {
					t.Errorf("%s mounts a service account token; neither the exporter nor its gate calls the API", ex.GetName())
				}
			}
			if exporters == 0 {
				t.Fatalf("no exporter DaemonSet among %v", r.names("DaemonSet"))
			}
		})
	}
}

// roleRules flattens a Role's rules to "<verb> <resource>[.<group>]".
func roleRules(o *unstructured.Unstructured) []string {
	var out []string
	rules, _ := o.Object["rules"].([]any)
	for _, r := range rules {
		m := r.(map[string]any)
		for _, g := range strs(m["apiGroups"]) {
			for _, res := range strs(m["resources"]) {
				name := res
				if g != "" {
					name += "." + g
				}
				for _, v := range strs(m["verbs"]) {
					out = append(out, v+" "+name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// The driver pod finds the DaemonSets it stops and deletes their pods: in
// the chart's namespace whenever the driver is enabled (the device plugin
// or not), and cluster-wide only once a rerollTargets entry names another
// namespace. Never through a Role in that namespace: one in a namespace
// that does not exist would fail the install, where a missing target is
// only reported.
func TestDriverMayStopPodsInEachTargetNamespace(t *testing.T) {
	want := []string{"delete pods", "get daemonsets.apps", "list daemonsets.apps", "list pods"}
	for _, tc := range []struct {
		name        string
		vals        map[string]any
		namespaces  []string // of the driver's Roles
		clusterWide bool
	}{
		{name: "defaults", namespaces: []string{"npu-operator"}},
		{name: "device plugin off", vals: map[string]any{"devicePlugin": map[string]any{"enabled": false}}, namespaces: []string{"npu-operator"}},
		{name: "targets in the chart's namespace", vals: map[string]any{"driver": map[string]any{"upgradePolicy": map[string]any{"rerollTargets": []any{
			map[string]any{"namespace": "npu-operator", "name": "holder"},
		}}}}, namespaces: []string{"npu-operator"}},
		{name: "targets elsewhere", vals: map[string]any{"driver": map[string]any{"upgradePolicy": map[string]any{"rerollTargets": []any{
			map[string]any{"namespace": "dra", "name": "npu-dra-plugin"},
			map[string]any{"namespace": "monitoring", "selector": "app=dcgm"},
		}}}}, namespaces: []string{"npu-operator"}, clusterWide: true},
		{name: "driver disabled", vals: map[string]any{"driver": map[string]any{"enabled": false, "upgradePolicy": map[string]any{"rerollTargets": []any{
			map[string]any{"namespace": "dra", "name": "npu-dra-plugin"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, variant{name: tc.name, vals: tc.vals})
			var namespaces []string
			for _, role := range r.ofKind("Role") {
				if role.GetName() != "npu-stack-driver" {
					continue
				}
				namespaces = append(namespaces, role.GetNamespace())
				if got := roleRules(role); !slices.Equal(got, want) {
					t.Errorf("Role %s/%s: %q, want %q", role.GetNamespace(), role.GetName(), got, want)
				}
				if r.findIn("RoleBinding", role.GetNamespace(), role.GetName()) == nil {
					t.Errorf("no RoleBinding %s/%s", role.GetNamespace(), role.GetName())
				}
			}
			if !slices.Equal(namespaces, tc.namespaces) {
				t.Errorf("driver Roles in %q, want %q", namespaces, tc.namespaces)
			}
			cr := r.find("ClusterRole", "npu-stack-driver")
			for _, rule := range []struct{ group, resource, verb string }{{"", "pods", "list"}, {"", "pods", "delete"}, {"apps", "daemonsets", "get"}, {"apps", "daemonsets", "list"}} {
				if got := cr != nil && ruleAllows(cr, rule.group, rule.resource, rule.verb); got != tc.clusterWide {
					t.Errorf("the driver's ClusterRole may %s %s cluster-wide: %v, want %v", rule.verb, rule.resource, got, tc.clusterWide)
				}
			}
		})
	}
}

// The driver pod records the state of its install over a loaded driver:
// the node-agent policy lets it set and remove that annotation, and only
// it.
func TestNodeAgentPolicyLetsTheDriverPodWriteInstallStatus(t *testing.T) {
	for _, domain := range []string{"npu.openfuyao.com", "npu.example.com"} {
		r := mustRender(t, variant{name: domain, vals: map[string]any{"labelDomain": domain}})
		vars := map[string]string{}
		for _, v := range nested[[]any](t, r.find("ValidatingAdmissionPolicy", "npu-stack-node-agents"), "spec", "variables") {
			m := v.(map[string]any)
			vars[m["name"].(string)] = m["expression"].(string)
		}
		key := "'" + domain + "/driver-upgrade.install-status'"
		perAgent := map[string]string{}
		body := strings.TrimSuffix(strings.TrimPrefix(vars["setAnnotations"], "{"), "}[variables.agent]")
		for _, entry := range strings.Split(body, "], ") {
			agent, keys, _ := strings.Cut(entry, ": [")
			perAgent[strings.Trim(agent, "' ")] = keys
		}
		if !strings.Contains(perAgent["driver pod"], key) {
			t.Errorf("%s: the driver pod may not set %s: %s", domain, key, vars["setAnnotations"])
		}
		if strings.Contains(perAgent["rebooter"], key) {
			t.Errorf("%s: the rebooter may set %s: %s", domain, key, vars["setAnnotations"])
		}
	}
}
