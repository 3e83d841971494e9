package chart_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// containerSecurity is what one container of the chart may hold.
type containerSecurity struct {
	privileged bool
	// capAdd are the capabilities added on top of a drop of ALL.
	capAdd []string
}

// securityTable is every container the chart renders, by component (the
// driver DaemonSets of all profiles are "driver") and container name, with
// why it needs what it gets. Privileged only where a host action needs it;
// every other container drops all capabilities and cannot escalate. A
// container missing here fails the test: add it with its reason.
var securityTable = map[string]containerSecurity{
	// Copies npu-healthwatch next to the vendor installer: files only.
	"driver/install-tools": {},
	// The vendor installer loads the driver's kernel modules (insmod) and
	// creates /dev/davinci*: the host's full privilege.
	"driver/driver": {privileged: true},
	// npu-smi, chrooted into the host, opens /dev/davinci* and
	// davinci_manager of the host, devices no device plugin hands out (the
	// driver creates them at load time).
	"driver/watch": {privileged: true},
	// The gate runs npu-smi to see the chips before the plugin starts.
	"device-plugin/wait-for-driver": {privileged: true},
	// Reads the driver tree, writes the CDI spec: files only, as root (the
	// spec directory is root's), with no capability.
	"device-plugin/cdi-generate": {},
	// Connects to the runtime's root-owned NRI socket, reads the spec and
	// stats /dev: root, no capability.
	"nri-injector/nri-inject": {},
	// Copies npu-healthwatch into an emptyDir for the device plugin's
	// command and probes: the image's user, no capability.
	"device-plugin/install-nri-ready": {},
	// The vendor plugin enumerates the chips through the driver's dcmi.
	"device-plugin/device-plugin": {privileged: true},
	// The vendor exporter reads chip metrics through dcmi (/dev/davinci*).
	"exporter/exporter": {privileged: true},
	// The exporter's gate: the device plugin's, npu-smi included.
	"exporter/wait-for-driver": {privileged: true},
	// rebooter.method=systemd: a D-Bus call to the host's logind (or
	// systemd), which grant a root peer without looking at its
	// capabilities (docs/host-contract.md, section 8): root, no
	// capability.
	"rebooter/rebooter": {},
	// rebooter.method=sysrq, or rebooter.fallbackMethod=sysrq: writes
	// /proc/sysrq-trigger, which needs a writable /proc, which only a
	// privileged container has.
	"rebooter/rebooter@sysrq": {privileged: true},
	// The hooks only talk to the API server.
	"preflight/preflight":    {},
	"rollout/rollout":        {},
	"rollout-resume/rollout": {},
	"uninstall/uninstall":    {},
}

// TestContainerSecurityContexts checks every container of every variant
// against securityTable: no unexpected privileged container, no added
// capability beyond the table's, no host namespace (hostPID, hostNetwork,
// hostIPC) anywhere.
func TestContainerSecurityContexts(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range variants() {
		r := mustRender(t, v)
		for _, kind := range []string{"DaemonSet", "Job", "CronJob"} {
			for _, o := range r.ofKind(kind) {
				spec := podSpec(t, o)
				for _, hostNS := range []string{"hostPID", "hostNetwork", "hostIPC"} {
					if spec[hostNS] == true {
						t.Errorf("%s: %s %s sets %s", v.name, kind, o.GetName(), hostNS)
					}
				}
				for _, field := range []string{"initContainers", "containers"} {
					for name, c := range containers(t, o, field) {
						key := securityKey(o, name, c)
						seen[key] = true
						checkContainerSecurity(t, v.name+": "+kind+" "+o.GetName()+" container "+name, key, c)
					}
				}
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(securityTable)) {
		if !seen[key] {
			t.Errorf("securityTable lists %s, which no variant renders: remove it", key)
		}
	}
}

func securityKey(o *unstructured.Unstructured, container string, c map[string]any) string {
	comp := o.GetLabels()["app.kubernetes.io/component"]
	if o.GetLabels()["app"] == "npu-driver-daemonset" {
		comp = "driver"
	}
	// A fleet with several host driver trees gets a device plugin and an
	// exporter per tree (device-plugin-<profile>): the same containers.
	for _, base := range []string{"device-plugin", "exporter", "nri-injector"} {
		if strings.HasPrefix(comp, base+"-") {
			comp = base
		}
	}
	key := comp + "/" + container
	if comp == "rebooter" && (hasArg(strs(c["args"]), "--method=sysrq") || hasArg(strs(c["args"]), "--fallback-method=sysrq")) {
		key += "@sysrq"
	}
	return key
}

func checkContainerSecurity(t *testing.T, where, key string, c map[string]any) {
	t.Helper()
	want, ok := securityTable[key]
	if !ok {
		t.Errorf("%s (%s) is not in securityTable: add it with the reason for its security context", where, key)
		return
	}
	sc, _ := c["securityContext"].(map[string]any)
	if got := sc["privileged"] == true; got != want.privileged {
		t.Errorf("%s: privileged %v, want %v", where, got, want.privileged)
	}
	caps, _ := sc["capabilities"].(map[string]any)
	if add := strs(caps["add"]); !slices.Equal(add, want.capAdd) {
		t.Errorf("%s adds capabilities %q, want %q", where, add, want.capAdd)
	}
	if want.privileged {
		return
	}
	if !slices.Contains(strs(caps["drop"]), "ALL") {
		t.Errorf("%s does not drop ALL capabilities", where)
	}
	if sc["allowPrivilegeEscalation"] != false {
		t.Errorf("%s may escalate privileges (allowPrivilegeEscalation %v)", where, sc["allowPrivilegeEscalation"])
	}
}

// TestRBACMatchesTheCode checks the rendered roles for what tests/auth
// proves on the API server, in every variant: nodes are patched, never
// updated; only the rollout evicts; only the rollout and the rebooter
// delete pods, and the driver pod in its own namespace; no wildcard; no
// Secrets, no pods/exec or attach.
func TestRBACMatchesTheCode(t *testing.T) {
	for _, v := range variants() {
		r := mustRender(t, v)
		for _, role := range append(r.ofKind("ClusterRole"), r.ofKind("Role")...) {
			comp := role.GetLabels()["app.kubernetes.io/component"]
			where := v.name + ": " + role.GetKind() + " " + role.GetName()
			rules, _ := role.Object["rules"].([]any)
			for _, rule := range rules {
				m := rule.(map[string]any)
				for _, f := range []string{"apiGroups", "resources", "verbs"} {
					if slices.Contains(strs(m[f]), "*") {
						t.Errorf("%s: wildcard %s", where, f)
					}
				}
			}
			for _, forbidden := range [][3]string{
				{"", "nodes", "update"}, {"", "secrets", "get"}, {"", "secrets", "list"}, {"", "secrets", "watch"},
				{"", "pods/exec", "create"}, {"", "pods/exec", "get"}, {"", "pods/attach", "create"},
				{"events.k8s.io", "events", "create"},
			} {
				if ruleAllows(role, forbidden[0], forbidden[1], forbidden[2]) {
					t.Errorf("%s grants %s %s", where, forbidden[2], strings.TrimPrefix(forbidden[0]+"/"+forbidden[1], "/"))
				}
			}
			if ruleAllows(role, "", "pods/eviction", "create") && comp != "rollout" {
				t.Errorf("%s may evict pods: only the rollout evicts (the rebooter deletes its own node's pods)", where)
			}
			// The driver pod deletes pods of its own node (the node-agent
			// policy refuses any other): the device-plugin pod of its
			// wedged node (health-watch) and, before an install over a
			// loaded driver, the pods of the DaemonSets it stops (driver
			// entry), through a Role in the chart's namespace, and
			// cluster-wide once rerollTargets names another namespace.
			// npu-hooks uninstall (the pre-delete hook) deletes the
			// rollout's and preflight's pods it stops, in the chart's
			// namespace.
			if ruleAllows(role, "", "pods", "delete") && comp != "rollout" && comp != "rebooter" && comp != "driver" && comp != "uninstall" {
				t.Errorf("%s may delete pods", where)
			}
		}
	}
}

// TestNodeAgentPolicyRendersEachAgentsKeys: the admission policy matches
// the agents the values enable, by their service accounts, and names
// their keys under labelDomain.
func TestNodeAgentPolicyRendersEachAgentsKeys(t *testing.T) {
	const (
		rebooterUser = "system:serviceaccount:npu-operator:npu-stack-rebooter"
		driverUser   = "system:serviceaccount:npu-operator:npu-stack-driver"
		injectorUser = "system:serviceaccount:npu-operator:npu-stack-nri-injector"
	)
	noInject := map[string]any{"inject": false}
	for _, tc := range []struct {
		name  string
		vals  map[string]any
		users []string // nil: no policy
	}{
		{name: "defaults", users: []string{rebooterUser, driverUser, injectorUser}},
		{name: "driver disabled", vals: map[string]any{"driver": map[string]any{"enabled": false}}, users: []string{rebooterUser, injectorUser}},
		{name: "rebooter disabled", vals: map[string]any{"rebooter": map[string]any{"enabled": false}}, users: []string{driverUser, injectorUser}},
		{name: "injection off", vals: map[string]any{"cdi": noInject}, users: []string{rebooterUser, driverUser}},
		{name: "no agents", vals: map[string]any{"rebooter": map[string]any{"enabled": false}, "driver": map[string]any{"enabled": false}, "cdi": noInject}},
		{name: "policy off", vals: map[string]any{"nodeAgentPolicy": map[string]any{"enabled": false}}},
		{name: "other domain", vals: map[string]any{"labelDomain": "npu.example.com"}, users: []string{rebooterUser, driverUser, injectorUser}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, variant{name: tc.name, vals: tc.vals})
			policies, bindings := r.ofKind("ValidatingAdmissionPolicy"), r.ofKind("ValidatingAdmissionPolicyBinding")
			if tc.users == nil {
				if len(policies)+len(bindings) > 0 {
					t.Fatalf("policies %v, bindings %v rendered; want none", r.names("ValidatingAdmissionPolicy"), r.names("ValidatingAdmissionPolicyBinding"))
				}
				return
			}
			if got, want := r.names("ValidatingAdmissionPolicy"), []string{"npu-stack-node-agents", "npu-stack-node-agents-pods"}; !slices.Equal(got, want) {
				t.Fatalf("policies %v, want %v", got, want)
			}
			if got := r.names("ValidatingAdmissionPolicyBinding"); !slices.Equal(got, r.names("ValidatingAdmissionPolicy")) {
				t.Fatalf("bindings %v do not bind each policy", got)
			}
			for _, b := range bindings {
				if nested[string](t, b, "spec", "policyName") != b.GetName() || !slices.Equal(strs(nested[[]any](t, b, "spec", "validationActions")), []string{"Deny"}) {
					t.Errorf("binding %s: %v", b.GetName(), b.Object["spec"])
				}
			}
			domain := "npu.openfuyao.com"
			if d, ok := tc.vals["labelDomain"].(string); ok {
				domain = d
			}
			for _, p := range policies {
				if nested[string](t, p, "spec", "failurePolicy") != "Fail" {
					t.Errorf("%s: failurePolicy is not Fail", p.GetName())
				}
				conds := nested[[]any](t, p, "spec", "matchConditions")
				expr := conds[0].(map[string]any)["expression"].(string)
				for _, u := range []string{rebooterUser, driverUser, injectorUser} {
					if got, want := strings.Contains(expr, "'"+u+"'"), slices.Contains(tc.users, u); got != want {
						t.Errorf("%s: matches %s %v, want %v (%s)", p.GetName(), u, got, want, expr)
					}
				}
				for _, val := range nested[[]any](t, p, "spec", "validations") {
					m := val.(map[string]any)
					if m["message"] == nil || m["messageExpression"] == nil || m["reason"] != "Forbidden" {
						t.Errorf("%s: validation %q lacks a message, a messageExpression or reason Forbidden", p.GetName(), m["expression"])
					}
				}
			}
			nodes := r.find("ValidatingAdmissionPolicy", "npu-stack-node-agents")
			vars := map[string]string{}
			for _, v := range nested[[]any](t, nodes, "spec", "variables") {
				m := v.(map[string]any)
				vars[m["name"].(string)] = m["expression"].(string)
			}
			if slices.Contains(tc.users, driverUser) && !strings.Contains(vars["setLabels"], "'"+domain+"/driver-ready'") {
				t.Errorf("setLabels %s lacks %s/driver-ready", vars["setLabels"], domain)
			}
			if slices.Contains(tc.users, rebooterUser) && !strings.Contains(vars["clearAnnotations"], "'"+domain+"/approve-reboot'") {
				t.Errorf("clearAnnotations %s lacks %s/approve-reboot", vars["clearAnnotations"], domain)
			}
			if slices.Contains(tc.users, injectorUser) && !strings.Contains(vars["setAnnotations"], "'nri-injector': ['"+domain+"/injection-status']") {
				t.Errorf("setAnnotations %s does not give the nri-injector %s/injection-status alone", vars["setAnnotations"], domain)
			}
			if other := "npu.openfuyao.com/"; domain != "npu.openfuyao.com" && strings.Contains(vars["setAnnotations"]+vars["setLabels"], other) {
				t.Errorf("keys of the default domain with labelDomain %s: %s", domain, vars["setAnnotations"])
			}
		})
	}
}

// TestRenderedNamespaceSetsPodSecurity: enforce privileged (the driver
// loads kernel modules), audit and warn as namespacePodSecurity says
// (baseline by default).
func TestRenderedNamespaceSetsPodSecurity(t *testing.T) {
	for _, tc := range []struct {
		vals        map[string]any
		audit, warn string
	}{
		{vals: map[string]any{"createNamespace": true}, audit: "baseline", warn: "baseline"},
		{vals: map[string]any{"createNamespace": true, "namespacePodSecurity": map[string]any{"warn": "privileged", "audit": "restricted"}}, audit: "restricted", warn: "privileged"},
	} {
		r := mustRender(t, variant{name: "namespace", vals: tc.vals})
		ns := r.find("Namespace", "npu-operator")
		if ns == nil {
			t.Fatal("createNamespace rendered no Namespace")
		}
		want := map[string]string{
			"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/audit": tc.audit, "pod-security.kubernetes.io/audit-version": "latest",
			"pod-security.kubernetes.io/warn": tc.warn, "pod-security.kubernetes.io/warn-version": "latest",
		}
		for k, v := range want {
			if got := ns.GetLabels()[k]; got != v {
				t.Errorf("%v: namespace label %s=%q, want %q", tc.vals, k, got, v)
			}
		}
	}
}
