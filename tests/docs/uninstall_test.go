package docs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

// contractKeys are every label and annotation key npu-stack writes on a
// Node: each method of contract.Keys that takes nothing and returns a
// string, so a key added there is covered here without a list to update.
func contractKeys(t *testing.T, keys contract.Keys) []string {
	t.Helper()
	v, str := reflect.ValueOf(keys), reflect.TypeOf("")
	var out []string
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Method(i)
		if m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0) != str {
			continue
		}
		k := m.Call(nil)[0].String()
		if strings.HasPrefix(k, keys.Domain+"/") {
			out = append(out, k)
		}
	}
	// Two names may spell one key (driver-version: the node's label and
	// the DaemonSet's annotation).
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) < 15 {
		t.Fatalf("only %d keys found on contract.Keys: %v", len(out), out)
	}
	return out
}

// sectionCommands returns the command lines of file's ```sh blocks under
// the "## heading" section.
func sectionCommands(t *testing.T, file, heading string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	start, end := 0, 0
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case l == "## "+heading:
			start = i + 1
		case start > 0 && end == 0 && strings.HasPrefix(l, "## "):
			end = i + 1
		}
	}
	if start == 0 {
		t.Fatalf("docs/%s has no section %q", file, heading)
	}
	var out []docCommand
	for _, c := range shCommands(t) {
		if c.file == file && c.line > start && (end == 0 || c.line < end) {
			out = append(out, c)
		}
	}
	return out
}

// TestUninstallMidUpgrade runs uninstall.md's steps as
// written (its namespace replaced by the test's) on a release caught in
// the middle of a driver upgrade: a node cordoned by the rollout, one the
// admin had cordoned before the upgrade, one cordoned by a recovery
// reboot, and a node outside the fleet carrying every key of the node
// contract. Afterwards no node carries a key of npu-stack, only the
// admin's node is cordoned, and nothing of the release is left in the
// cluster. Without uninstall.cleanup, with the rollout a hook (left
// running by helm uninstall, without its RBAC, the nodes still
// cordoned), npu-hooks uninstall does it all after helm uninstall, and
// the host files stay, as the page says. With uninstall.cleanup, the
// rollout a regular Job, the pre-delete hook does it all, the driver
// pods removing npu-stack's host files, and npu-hooks uninstall then
// finds nothing to do. Either way the installed driver stays.
func TestUninstallMidUpgrade(t *testing.T) {
	for _, tc := range []struct {
		cleanup bool
		mode    string
	}{{false, "hook"}, {true, "job"}} {
		t.Run(fmt.Sprintf("cleanup=%t,rollout=%s", tc.cleanup, tc.mode), func(t *testing.T) { uninstallMidUpgrade(t, tc.cleanup, tc.mode) })
	}
}

func uninstallMidUpgrade(t *testing.T, cleanup bool, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	f := midUpgrade(ctx, t, cleanup, mode)
	all := f.names()
	if got, want := cordoned(ctx, t, all), sortedNames(f.rollout.Name(), f.admin.Name(), f.recovery.Name()); !slices.Equal(got, want) {
		t.Fatalf("before the uninstall cordoned %v, want %v", got, want)
	}
	for _, p := range f.npu() {
		// The recovery node's /run was emptied by its reboot: its driver
		// pod may not have written its markers again yet.
		got := presentHostFiles(p)
		if !slices.Contains(got, hostFiles[0]) {
			t.Fatalf("before the uninstall node %s has %v of npu-stack's host files %v", p.Name(), got, hostFiles)
		}
		t.Logf("before the uninstall node %s has %v", p.Name(), got)
	}
	// Every key, on a node that is no NPU node of the release: removed
	// too, wherever it is.
	var patch []string
	for _, k := range contractKeys(t, f.keys) {
		patch = append(patch, fmt.Sprintf("%q:\"true\"", k))
	}
	body := "{" + strings.Join(patch, ",") + "}"
	patchNode(ctx, t, f.cpu.Name(), `{"metadata":{"labels":`+body+`,"annotations":`+body+`}}`)

	// The rollout has moved a node, so it keeps a record the uninstall
	// must delete (waitNothingLeft checks).
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	err := testbed.WaitFor(rctx, cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "configmaps", f.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = "app.kubernetes.io/component=rollout-record"
	}), &corev1.ConfigMap{}, func(cms []*corev1.ConfigMap) (bool, error) { return len(cms) > 0, nil })
	rcancel()
	if err != nil {
		t.Fatalf("before the uninstall: no rollout record in %s: %v", f.ns, err)
	}
	out := runUninstallSection(ctx, t, f.ns, f.keys.Domain)
	t.Logf("uninstall.md's output:\n%s", out)

	waitNothingLeft(ctx, t, f.ns)
	for _, n := range all {
		if keys := npuStackKeys(ctx, t, f.keys.Domain, n); len(keys) > 0 {
			t.Errorf("node %s still carries npu-stack's %v", n, keys)
		}
	}
	if got := cordoned(ctx, t, all); !slices.Equal(got, []string{f.admin.Name()}) {
		t.Errorf("after the uninstall cordoned %v; want only %s, which the admin had cordoned before", got, f.admin.Name())
	}
	for _, p := range f.npu() {
		got := presentHostFiles(p)
		switch {
		case cleanup && len(got) > 0:
			t.Errorf("node %s: the driver pod left %v", p.Name(), got)
		case !cleanup && !slices.Contains(got, hostFiles[0]):
			t.Errorf("node %s: without uninstall.cleanup the docs say %s stays; found only %v", p.Name(), hostFiles[0], got)
		}
	}
	// A rollout still running when helm uninstall deletes the driver
	// DaemonSets gives its nodes back itself (UpgradeAbandoned); the hook
	// stops it first, so there the uninstall lifts the rollout's cordon.
	if abandoned := nodeEvents(ctx, t, f.rollout.Name(), contract.EventUpgradeAbandoned); cleanup && len(abandoned) > 0 {
		t.Errorf("node %s: the rollout gave it back (%q) although the pre-delete hook stops the rollout before anything else", f.rollout.Name(), abandoned)
	} else if !cleanup {
		t.Logf("node %s: UpgradeAbandoned events %q", f.rollout.Name(), abandoned)
	}
	if cleanup {
		// What npu-hooks uninstall (the hook) read to say so: each driver
		// pod's Event.
		for _, p := range f.npu() {
			msgs := nodeEvents(ctx, t, p.Name(), contract.EventHostFilesRemoved)
			if len(msgs) != 1 || !strings.Contains(msgs[0], "Normal: request ") || !strings.Contains(msgs[0], "removed npu-stack's files from the host: /var/run/cdi/huawei-com-npu.yaml") {
				t.Errorf("node %s: HostFilesRemoved events %q, want one saying the files went", p.Name(), msgs)
			}
		}
	}
	for _, p := range []*procnode.Node{f.rollout, f.admin} {
		if st, err := p.Host().State(); err != nil || st.InstalledDriver != uninstallNew || st.LoadedDriver != uninstallOld {
			t.Errorf("node %s: installed %q loaded %q (%v); the driver installed for the upgrade stays, the loaded one stays loaded", p.Name(), st.InstalledDriver, st.LoadedDriver, err)
		}
	}
	if want := "uninstall finished: 0 nodes cleaned"; cleanup && !strings.Contains(out, want) {
		t.Errorf("after the pre-delete hook npu-hooks uninstall must find nothing to do (%q)", want)
	}
}

// nodeEvents are "type: message" of node's Events of reason.
func nodeEvents(ctx context.Context, t *testing.T, node string, reason contract.EventReason) []string {
	t.Helper()
	evs, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"reason": string(reason), "involvedObject.name": node}.String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Type+": "+e.Message)
	}
	return out
}

// runUninstallSection runs the section's commands in order with bash
// (npu-hooks uninstall given the release's --label-domain, as the page
// says for another domain),
// the way TestDocCommandsRun runs the other pages, and returns their
// output.
func runUninstallSection(ctx context.Context, t *testing.T, ns, domain string) string {
	t.Helper()
	helm, err := testbed.Engine("helm3/helm")
	if err != nil {
		t.Fatal(err)
	}
	environ := append(os.Environ(),
		"KUBECONFIG="+env.Kubeconfig,
		"PATH="+strings.Join([]string{kubectlDir(t), env.ProductBinDir, filepath.Dir(helm), os.Getenv("PATH")}, string(os.PathListSeparator)),
		"HELM_CACHE_HOME="+filepath.Join(t.TempDir(), "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(t.TempDir(), "helm-config"),
	)
	var all strings.Builder
	ran := map[string]bool{}
	for _, c := range sectionCommands(t, "uninstall.md", "Steps") {
		cmdline := strings.ReplaceAll(c.text, "npu-operator", ns)
		if strings.HasPrefix(cmdline, "npu-hooks uninstall ") {
			// The page's flag for a release of another labelDomain.
			cmdline += " --label-domain " + domain
		}
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmdline)
		cmd.Env = environ
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(&all, "$ %s\n%s", cmdline, out)
		if err != nil {
			t.Fatalf("%s\n  ran: %s\n  %v\n%s\n%s", c, cmdline, err, out, env.PodLogs(ctx, ns, 40))
		}
		for _, prefix := range []string{"helm uninstall ", "npu-hooks uninstall "} {
			ran[prefix] = ran[prefix] || strings.HasPrefix(c.text, prefix)
		}
	}
	if !ran["helm uninstall "] || !ran["npu-hooks uninstall "] {
		t.Fatalf("uninstall.md's steps must run helm uninstall and npu-hooks uninstall; ran %v", ran)
	}
	return all.String()
}

// waitNothingLeft waits for the release's last pods to go (Helm deletes
// hook Jobs with background propagation), then checks that nothing of
// the release is left, in its namespace or cluster-wide.
func waitNothingLeft(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var left []string
	err := testbed.WaitFor(wctx, cache.NewListWatchFromClient(env.Client.CoreV1().RESTClient(), "pods", ns, fields.Everything()), &corev1.Pod{},
		func(pods []*corev1.Pod) (bool, error) {
			left = left[:0]
			for _, p := range pods {
				left = append(left, p.Name)
			}
			return len(pods) == 0, nil
		})
	if err != nil {
		t.Errorf("pods of the release left in %s: %v (%v)", ns, left, err)
	}
	c := env.Client
	found := map[string]int{}
	count := func(what string, n int, err error) {
		if err != nil {
			t.Fatalf("list %s: %v", what, err)
		}
		if n > 0 {
			found[what] = n
		}
	}
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	count("Jobs", len(jobs.Items), err)
	crons, err := c.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
	count("CronJobs", len(crons.Items), err)
	dss, err := c.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	count("DaemonSets", len(dss.Items), err)
	deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	count("Deployments (the fleet exporter)", len(deps.Items), err)
	// The rollout records are the rollout's, not Helm's: npu-hooks
	// uninstall deletes them. Listed by their component as well, in case
	// one lost the release label.
	records, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rollout-record"})
	count("rollout records", len(records.Items), err)
	leases, err := c.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	count("Leases", len(leases.Items), err)
	release := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=npu-stack"}
	sas, err := c.CoreV1().ServiceAccounts(ns).List(ctx, release)
	count("ServiceAccounts", len(sas.Items), err)
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, release)
	count("ConfigMaps", len(cms.Items), err)
	secrets, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	count("Helm release Secrets", len(secrets.Items), err)
	roles, err := c.RbacV1().Roles(ns).List(ctx, release)
	count("Roles", len(roles.Items), err)
	// Cluster-wide objects are named after fullnameOverride, the namespace.
	crs, err := c.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	count("ClusterRoles", len(named(crs.Items, ns)), err)
	crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	count("ClusterRoleBindings", len(named(crbs.Items, ns)), err)
	vaps, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	count("ValidatingAdmissionPolicies", len(named(vaps.Items, ns)), err)
	if len(found) > 0 {
		t.Errorf("left of the release after the uninstall: %v", found)
	}
}

// named are the objects whose name starts with prefix-.
func named[T any, PT interface {
	*T
	GetName() string
}](items []T, prefix string) []string {
	var out []string
	for i := range items {
		if n := PT(&items[i]).GetName(); strings.HasPrefix(n, prefix+"-") {
			out = append(out, n)
		}
	}
	return out
}

func sortedNames(names ...string) []string {
	slices.Sort(names)
	return names
}
