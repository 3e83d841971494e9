package docs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/openfuyao/npu-stack/internal/reboot"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// These tests read a page and the code or chart it describes and compare
// them, the way docfacts_test.go does: each guards a statement a page once
// got wrong.

// readRepo returns a file of the checkout.
func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text under the heading (any level) whose title is
// title, up to the next heading of the same or a higher level.
func section(t *testing.T, text, file, title string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	start, level := -1, 0
	for i, l := range lines {
		h := strings.TrimLeft(l, "#")
		n := len(l) - len(h)
		if n == 0 || !strings.HasPrefix(h, " ") {
			continue
		}
		if start < 0 {
			if strings.TrimSpace(h) == title {
				start, level = i+1, n
			}
			continue
		}
		if n <= level {
			return strings.Join(lines[start:i], "\n")
		}
	}
	if start < 0 {
		t.Fatalf("%s has no section %q", file, title)
	}
	return strings.Join(lines[start:], "\n")
}

// shLines returns the command lines of the ```sh blocks of text.
func shLines(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch tl := strings.TrimSpace(l); {
		case !in && tl == "```sh":
			in = true
		case in && tl == "```":
			in = false
		case in && tl != "" && !strings.HasPrefix(tl, "#"):
			out = append(out, tl)
		}
	}
	return out
}

// renderClient renders the chart of this checkout offline, as `helm
// template` would, hooks included, under release name rel.
func renderClient(t *testing.T, rel string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.Load(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = rel, "npu-operator"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	r, err := inst.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	var objs []*unstructured.Unstructured
	manifests := []string{r.Manifest}
	for _, h := range r.Hooks {
		manifests = append(manifests, h.Manifest)
	}
	for _, m := range manifests {
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(m), 4096)
		for {
			var o map[string]any
			if err := dec.Decode(&o); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatal(err)
			}
			if len(o) > 0 {
				objs = append(objs, &unstructured.Unstructured{Object: o})
			}
		}
	}
	return objs
}

// podImages returns every container and init-container image of objs.
func podImages(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		for _, path := range [][]string{
			{"spec", "template", "spec"},
			{"spec", "jobTemplate", "spec", "template", "spec"},
		} {
			spec, ok, _ := unstructured.NestedMap(o.Object, path...)
			if !ok {
				continue
			}
			for _, kind := range []string{"initContainers", "containers"} {
				cs, _, _ := unstructured.NestedSlice(spec, kind)
				for _, c := range cs {
					if img, _ := c.(map[string]any)["image"].(string); img != "" && !slices.Contains(out, img) {
						out = append(out, img)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

var (
	skopeoDest   = regexp.MustCompile(`skopeo copy .* docker://(\S+)$`)
	valuesFlag   = regexp.MustCompile(`-f (docs/examples/\S+\.yaml)`)
	registryFlag = regexp.MustCompile(`imageRegistry=([^,\s]+)`)
	releaseLine  = regexp.MustCompile(`^make release .*REGISTRY=(\S+)`)
)

// TestAirGappedInstallCopiesEveryImage: the air-gapped install page
// copies (skopeo) or builds (make release) every image the helm command
// after it pulls, so preflight finds each profile's driver image.
func TestAirGappedInstallCopiesEveryImage(t *testing.T) {
	sec := section(t, readRepo(t, "docs/air-gapped-install.md"), "docs/air-gapped-install.md", "Steps")
	lines := shLines(sec)
	copied, built := map[string]bool{}, ""
	for _, l := range lines {
		if m := skopeoDest.FindStringSubmatch(l); m != nil {
			copied[m[1]] = true
		}
		if m := releaseLine.FindStringSubmatch(l); m != nil {
			built = m[1] + "/npu-stack/"
		}
	}
	installs := 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "helm install ") && !strings.HasPrefix(l, "helm upgrade ") {
			continue
		}
		installs++
		vals := map[string]any{}
		if m := valuesFlag.FindStringSubmatch(l); m != nil {
			vals = valuesFile(t, filepath.Join(repoRoot(t), m[1]))
		}
		m := registryFlag.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("docs/air-gapped-install.md sets no imageRegistry: %s", l)
		}
		vals["imageRegistry"] = m[1]
		for _, img := range podImages(renderClient(t, "npu-stack", vals)) {
			if built != "" && strings.HasPrefix(img, built) {
				continue
			}
			if !copied[img] {
				t.Errorf("docs/air-gapped-install.md pulls %s, which no skopeo copy of the section copies (and make release does not build): %s", img, l)
			}
		}
	}
	if installs == 0 {
		t.Fatal("docs/air-gapped-install.md has no helm install")
	}
}

// TestReleaseFilesExist: what a published Apache-2.0 project carries, and
// a release page that names every artefact make release writes.
func TestReleaseFilesExist(t *testing.T) {
	ch, err := loader.LoadDir(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatal(err)
	}
	if lic := ch.Metadata.Annotations["artifacthub.io/license"]; lic != "Apache-2.0" {
		t.Fatalf("Chart.yaml's license is %q; this test knows Apache-2.0", lic)
	}
	license := readRepo(t, "LICENSE")
	for _, w := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(license, w) {
			t.Errorf("LICENSE is not the Apache License 2.0 text (Chart.yaml says Apache-2.0): lacks %q", w)
		}
	}
	if s := readRepo(t, "SECURITY.md"); !strings.Contains(s, "https://github.com/openfuyao/npu-stack/security/advisories/new") {
		t.Error("SECURITY.md gives no private channel (a GitHub security advisory) to report a vulnerability")
	}
	readRepo(t, "CONTRIBUTING.md")
	changelog := readRepo(t, "CHANGELOG.md")
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(ch.Metadata.Version) + `\b`).MatchString(changelog) {
		t.Errorf("CHANGELOG.md has no section for the chart's version %s", ch.Metadata.Version)
	}
	rel := readRepo(t, "docs/releasing.md")
	mk := readRepo(t, "Makefile")
	m := regexp.MustCompile(`(?m)^HOOKS_PLATFORMS := (.+)$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no HOOKS_PLATFORMS")
	}
	for _, p := range strings.Fields(m[1]) {
		if !strings.Contains(rel, "`"+strings.Replace(p, "/", "_", 1)+"`") {
			t.Errorf("docs/releasing.md does not name the npu-hooks tarball of %s, which make release writes", p)
		}
	}
	for _, w := range []string{"make release VERSION=", "SHA256SUMS", "sha256sum -c", "npu-hooks_<version>_<os>_<arch>.tar.gz", "npu-stack-<version>.tgz", "not published"} {
		if !strings.Contains(rel, w) {
			t.Errorf("docs/releasing.md does not say %q", w)
		}
	}
}

// gitHubDoc is an absolute link to a page of this repository.
var gitHubDoc = regexp.MustCompile(`\]\(https://github\.com/openfuyao/npu-stack/blob/main/([^)#\s]+)(#[^)\s]*)?\)`)

// TestChartReadmeStandsAlone: the chart README is shown where the chart
// goes (helm show readme, Artifact Hub), without the repository around
// it: its links are absolute, and each names a page and heading that exist.
func TestChartReadmeStandsAlone(t *testing.T) {
	readme := readRepo(t, "charts/npu-stack/README.md")
	if m := regexp.MustCompile(`\]\((\.\.?/[^)]*)\)`).FindAllStringSubmatch(readme, -1); m != nil {
		for _, l := range m {
			t.Errorf("charts/npu-stack/README.md links %s relatively, which breaks outside the repository", l[1])
		}
	}
	links := gitHubDoc.FindAllStringSubmatch(readme, -1)
	if len(links) == 0 {
		t.Fatal("charts/npu-stack/README.md links no page of the documentation")
	}
	for _, l := range links {
		text := readRepo(t, l[1])
		if l[2] != "" && !slices.Contains(anchors(text), strings.TrimPrefix(l[2], "#")) {
			t.Errorf("charts/npu-stack/README.md links %s%s: no such heading", l[1], l[2])
		}
	}
}

// anchors are the GitHub anchors of a Markdown page's headings.
func anchors(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
		}
		if in || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '—' && r != '–' && r != '→' && r != '…':
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestVendorImageTagsAreNotTheChartsVersion: an empty image tag renders
// the chart's appVersion, npu-stack's version, which is right for
// npu-stack's images and names no image of the vendor's.
func TestVendorImageTagsAreNotTheChartsVersion(t *testing.T) {
	ch, err := loader.LoadDir(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{"devicePlugin": map[string]any{"image": map[string]any{"tag": ""}}}
	imgs := podImages(renderClient(t, "npu-stack", vals))
	want := "ascendhub/ascend-k8sdeviceplugin:" + ch.Metadata.AppVersion
	if !slices.ContainsFunc(imgs, func(s string) bool { return strings.HasSuffix(s, want) }) {
		t.Fatalf("an empty devicePlugin.image.tag no longer renders %s: %v; revisit this test", want, imgs)
	}
	readme := readRepo(t, "charts/npu-stack/README.md")
	for _, key := range []string{"devicePlugin.image.tag", "exporter.image.tag"} {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(key) + "` \\|.*$").FindString(readme)
		if row == "" {
			t.Errorf("charts/npu-stack/README.md has no row for %s", key)
			continue
		}
		if strings.Contains(row, "empty = the chart appVersion") {
			t.Errorf("charts/npu-stack/README.md offers the chart's appVersion as %s, which renders %s, no image of the vendor's: %s", key, want, row)
		}
	}
}

// TestSourcesCiteNoDesignNotes: the design notes are not in the
// repository; a comment, a --help or a Makefile line citing them sends
// the reader nowhere.
func TestSourcesCiteNoDesignNotes(t *testing.T) {
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == ".cache" || n == "bin" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, ".sh") && d.Name() != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "DESIGN"+".md") {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s:%d cites %s, which the repository does not have: %s", rel, i+1, "DESIGN"+".md", strings.TrimSpace(l))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWedgedChipsStayAdvertisedWithoutTheAPIServer: the vendor device
// plugin does not read the driver-ready marker (internal/health/plugin.go);
// only deleting its pod, an API call, takes the chips from the scheduler.
// A page must not promise that a node cut off from the API server stops
// advertising them.
func TestWedgedChipsStayAdvertisedWithoutTheAPIServer(t *testing.T) {
	if !strings.Contains(readRepo(t, "internal/health/plugin.go"), "does not read our\n// marker") {
		t.Fatal("internal/health/plugin.go no longer says the vendor device plugin ignores the marker; revisit this test")
	}
	claim := regexp.MustCompile(`(?i)(cut off from the API server|marker is already removed|already removed on wedged chips)[^|\n]*(stops advertising|device plugin stops)|(?i)readiness marker the validator and device plugin read`)
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if m := claim.FindString(line); m != "" {
				t.Errorf("%s:%d says the marker alone takes the chips from the scheduler (%q); a running device plugin goes on advertising them until the watch deletes its pod", f, i+1, m)
			}
		}
	}
}

// TestDBusMountIsTheDirectory: the chart mounts the host's /run/dbus
// directory into the rebooter, not its socket file (a bind-mounted file
// keeps pointing at the old socket once dbus restarts).
func TestDBusMountIsTheDirectory(t *testing.T) {
	found := false
	for _, o := range renderClient(t, "npu-stack", map[string]any{}) {
		if o.GetKind() != "DaemonSet" || !strings.HasSuffix(o.GetName(), "-rebooter") {
			continue
		}
		vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			hp, _ := v.(map[string]any)["hostPath"].(map[string]any)
			if hp != nil && hp["path"] == "/run/dbus" && hp["type"] == "Directory" {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("the rebooter no longer mounts the host's /run/dbus as a Directory; revisit this test")
	}
	claim := regexp.MustCompile("(?i:system_bus_socket`?,? mounted|mounted[^|.\\n]{0,20}system_bus_socket)|system_bus_socket[^|.\\n]{0,40}\\b(type|as a) `?Socket\\b")
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if m := claim.FindString(line); m != "" {
				t.Errorf("%s:%d says the socket file is mounted (%q); the chart mounts the directory /run/dbus (hostPath type Directory)", f, i+1, m)
			}
		}
	}
}

// TestFailedRebootRetries: the rebooter retries a failed reboot
// rebooter.rebootAttempts times in all, after a backoff that starts at
// minBackoff and doubles, then stops until its pod is deleted
// (internal/reboot/acts.go fail); a failed drain counts as an attempt.
func TestFailedRebootRetries(t *testing.T) {
	agent := readRepo(t, "internal/reboot/agent.go")
	m := regexp.MustCompile(`minBackoff = (\d+) \* time\.Second`).FindStringSubmatch(agent)
	if m == nil {
		t.Fatal("internal/reboot/agent.go has no minBackoff in seconds; revisit this test")
	}
	var first int
	if _, err := fmt.Sscan(m[1], &first); err != nil {
		t.Fatal(err)
	}
	var waits []string
	for i := 0; i < reboot.DefaultRebootAttempts-1; i++ {
		waits = append(waits, fmt.Sprintf("%d s", first<<i))
	}
	vals := valuesFile(t, filepath.Join(repoRoot(t), "charts", "npu-stack", "values.yaml"))
	if n, _ := vals["rebooter"].(map[string]any)["rebootAttempts"].(int64); n != int64(reboot.DefaultRebootAttempts) {
		t.Fatalf("rebooter.rebootAttempts %d is not reboot.DefaultRebootAttempts %d", n, reboot.DefaultRebootAttempts)
	}
	sh := readRepo(t, "docs/self-healing.md")
	row := regexp.MustCompile(`(?m)^\| failed reboot \|.*$`).FindString(sh)
	for _, w := range append(waits, "rebootAttempts") {
		if !strings.Contains(row, w) {
			t.Errorf("docs/self-healing.md's failed-reboot guard does not say %q (with rebootAttempts %d the rebooter retries after %s, then stops): %s", w, reboot.DefaultRebootAttempts, strings.Join(waits, " and "), row)
		}
	}
	never := regexp.MustCompile(`(?i)doubling to 10 min|backoff up to 10 min`)
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "RebootFailed") || strings.Contains(line, "failed reboot") {
				if m := never.FindString(line); m != "" {
					t.Errorf("%s:%d says a failed reboot is retried %q; the rebooter stops after rebooter.rebootAttempts attempts", f, i+1, m)
				}
			}
		}
	}
}

// TestPlanAndStatusAdoptTheRolloutsPolicy: plan and status take every
// policy flag the user does not give from the chart's rollout Job
// (internal/hookcli/adopt.go); telling readers to repeat them is wrong.
func TestPlanAndStatusAdoptTheRolloutsPolicy(t *testing.T) {
	if !strings.Contains(readRepo(t, "internal/hookcli/status.go"), "chartRolloutArgs(ctx, client, f.namespace)") {
		t.Fatal("status and plan no longer read the chart's rollout Job; revisit this test")
	}
	wrong := regexp.MustCompile(`(?is)read the\s+policy from their flags|pass the same values\s+as the chart`)
	up := readRepo(t, "docs/first-upgrade.md")
	if m := wrong.FindString(up); m != "" {
		t.Errorf("docs/first-upgrade.md says %q; plan and status adopt the policy of the chart's rollout Job", m)
	}
	if !strings.Contains(up, "policy of the chart's rollout Job") {
		t.Error("docs/first-upgrade.md does not say that plan and status take the policy of the chart's rollout Job")
	}
}

// TestApprovalsOutsideARollout: every rollout run, the resume CronJob's
// included, removes an approval no reboot request uses from a node that
// is up to date or skipped (internal/rollout/decide.go, staleApproval).
func TestApprovalsOutsideARollout(t *testing.T) {
	if !strings.Contains(readRepo(t, "internal/rollout/decide.go"), "staleApproval(b, n)") {
		t.Fatal("the rollout no longer removes stale approvals; revisit this test")
	}
	wrong := regexp.MustCompile(`(?is)nothing\s+removes\s+an\s+approval|approval\s+given\s+while\s+no\s+rollout\s+runs[^.]*authorises`)
	for f, text := range userDocs(t) {
		if m := wrong.FindString(text); m != "" {
			t.Errorf("%s says %q; any rollout run (the resume CronJob every 10 minutes too) removes an approval no reboot request uses", f, strings.Join(strings.Fields(m), " "))
		}
	}
}

// TestFailureStepsAreTheRollouts: the steps docs/observability.md lists
// for driver-upgrade.failure-step are the ones the rollout fails a node
// at (wait-for-jobs proceeds at its timeout, never fails).
func TestFailureStepsAreTheRollouts(t *testing.T) {
	consts := map[string]string{}
	for _, f := range []string{"internal/rollout/actions.go", "internal/contract/cordon.go"} {
		for _, m := range regexp.MustCompile(`(?m)^\s*(Step\w+)\s*=\s*"([^"]+)"`).FindAllStringSubmatch(readRepo(t, f), -1) {
			consts[m[1]] = m[2]
		}
	}
	var want []string
	for _, f := range []string{"internal/rollout/decide.go", "internal/rollout/validation.go"} {
		for _, m := range regexp.MustCompile(`\.fail\(n, (Step\w+)|Step: (Step\w+)`).FindAllStringSubmatch(readRepo(t, f), -1) {
			v := consts[m[1]+m[2]]
			if v == "" {
				t.Fatalf("%s: no value for %s", f, m[1]+m[2])
			}
			if !slices.Contains(want, v) {
				want = append(want, v)
			}
		}
	}
	slices.Sort(want)
	row := regexp.MustCompile("(?m)^\\| `npu\\.openfuyao\\.com/driver-upgrade\\.failure-reason`.*$").FindString(readRepo(t, "docs/observability.md"))
	if row == "" {
		t.Fatal("docs/observability.md has no failure-reason row")
	}
	inner := regexp.MustCompile(`where \(([^)]*)\)`).FindStringSubmatch(row)
	if inner == nil {
		t.Fatalf("docs/observability.md's failure-step row names no steps: %s", row)
	}
	var got []string
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(inner[1], -1) {
		got = append(got, m[1])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("docs/observability.md lists failure steps %v; the rollout fails nodes at %v", got, want)
	}
}

// TestChartUpgradeKeepsTheNewDefaults: a chart upgrade with
// --reuse-values drops the new chart's defaults for keys never set; the
// documented one merges them (--reset-then-reuse-values, which both helm
// CLIs the tests build have).
func TestChartUpgradeKeepsTheNewDefaults(t *testing.T) {
	sec := section(t, readRepo(t, "docs/installation.md"), "docs/installation.md", "Upgrade from the previous chart version")
	n := 0
	for _, l := range shLines(sec) {
		if !strings.HasPrefix(l, "helm upgrade ") {
			continue
		}
		n++
		if strings.Contains(l, "--reuse-values") {
			t.Errorf("docs/installation.md's chart upgrade uses --reuse-values, which keeps the old chart's values and drops the new chart's defaults: %s", l)
		}
		if !strings.Contains(l, "--reset-then-reuse-values") && !strings.Contains(l, " -f ") {
			t.Errorf("docs/installation.md's chart upgrade neither merges the new defaults (--reset-then-reuse-values) nor passes the values files: %s", l)
		}
	}
	if n == 0 {
		t.Fatal("docs/installation.md's chart upgrade has no helm upgrade")
	}
	if !strings.Contains(sec, "Helm 3.14") {
		t.Error("docs/installation.md's chart upgrade does not say which helm has --reset-then-reuse-values (3.14+)")
	}
	for _, cli := range []string{"helm3/helm", "helm4/helm"} {
		bin, err := testbed.Engine(cli)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "upgrade", "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--reset-then-reuse-values") {
			t.Errorf("%s upgrade has no --reset-then-reuse-values (%v)", cli, err)
		}
	}
}

// TestInsecureRegistryOnlyWithoutTLS: the deployers' kustomizations turn
// TLS off only for a registry without it, so the line is commented out.
func TestInsecureRegistryOnlyWithoutTLS(t *testing.T) {
	text := readRepo(t, "docs/deployers.md")
	in := false
	n := 0
	for i, l := range strings.Split(text, "\n") {
		if tl := strings.TrimSpace(l); strings.HasPrefix(tl, "```") {
			in = tl == "```yaml"
			continue
		}
		if !in || !regexp.MustCompile(`(?i)insecure`).MatchString(l) {
			continue
		}
		n++
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			t.Errorf("docs/deployers.md:%d turns TLS off for every registry, while only a registry without TLS needs it: %s", i+1, strings.TrimSpace(l))
		}
	}
	if n == 0 {
		t.Error("docs/deployers.md's kustomizations no longer show how to reach a registry without TLS")
	}
}

// TestShellLinesRunOnDarwin: npu-hooks ships for darwin; a documented
// command line must not need GNU-only flags, and a Flux forced reconcile
// gives requestedAt and forceAt one value (helm-controller forces only
// when they are equal).
func TestShellLinesRunOnDarwin(t *testing.T) {
	gnu := regexp.MustCompile(`xargs (-[a-zA-Z]*[dr]\b|--delimiter|--no-run-if-empty)|date -d|grep -P|readlink -f|sed -i `)
	forced := regexp.MustCompile(`reconcile\.fluxcd\.io/requestedAt=(\S+) reconcile\.fluxcd\.io/forceAt=(\S+?)` + "`?$")
	for f, text := range userDocs(t) {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		for _, l := range shLines(text) {
			if m := gnu.FindString(l); m != "" {
				t.Errorf("%s: %q is GNU-only (npu-hooks ships for darwin too): %s", f, m, l)
			}
		}
		for i, l := range strings.Split(text, "\n") {
			if !strings.Contains(l, "reconcile.fluxcd.io/forceAt=") {
				continue
			}
			m := forced.FindStringSubmatch(strings.TrimRight(strings.TrimSpace(l), ").`"))
			if m == nil || m[1] != m[2] || strings.Contains(m[1], "$(") {
				t.Errorf("%s:%d: requestedAt and forceAt must be one value set once (a $(date) each may differ by a second, and helm-controller then forces nothing): %s", f, i+1, strings.TrimSpace(l))
			}
		}
	}
}

// TestParserLayoutsAreNamed: docs/development.md names every npu-smi
// layout internal/npusmi reads.
func TestParserLayoutsAreNamed(t *testing.T) {
	names := regexp.MustCompile(`layout\{name: "([^"]+)"`).FindAllStringSubmatch(readRepo(t, "internal/npusmi/layout.go"), -1)
	if len(names) < 3 {
		t.Fatalf("internal/npusmi/layout.go: %d layouts found", len(names))
	}
	line := regexp.MustCompile(`(?m)^\s+npusmi/.*$`).FindString(readRepo(t, "docs/development.md"))
	for _, n := range names {
		if !strings.Contains(line, n[1]) {
			t.Errorf("docs/development.md's npusmi line does not name the %s layout the parser reads: %s", n[1], strings.TrimSpace(line))
		}
	}
}

// TestRebootTimeoutIsTwoWindows: rebootTimeoutSeconds bounds the reboot
// step and, separately, the validation step (decide.go, validation.go).
func TestRebootTimeoutIsTwoWindows(t *testing.T) {
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "from the reboot command to validated") {
				t.Errorf("%s:%d says rebootTimeoutSeconds spans the reboot command to validated; it bounds the reboot step and the validation step, each on its own: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestObjectNamesAreTheFullName: the chart names objects after its full
// name (the release name when it contains npu-stack, else
// <release>-npu-stack), so <release>-x names nothing for a release called
// otherwise, and a command naming the hook-mode Job of the release
// npu-stack finds nothing in job mode or under another release.
func TestObjectNamesAreTheFullName(t *testing.T) {
	var sas []string
	for _, o := range renderClient(t, "fleet", map[string]any{}) {
		if o.GetKind() == "ServiceAccount" {
			sas = append(sas, o.GetName())
		}
	}
	if !slices.Contains(sas, "fleet-npu-stack-rebooter") {
		t.Fatalf("release fleet renders service accounts %v; revisit this test", sas)
	}
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			for _, m := range regexp.MustCompile(`<release>-[a-z][a-z-]*`).FindAllString(line, -1) {
				if m != "<release>-npu-stack" {
					t.Errorf("%s:%d names an object %q; objects are named <fullname>-... (release fleet: fleet-npu-stack-rebooter)", f, i+1, m)
				}
			}
		}
		for _, l := range shLines(text) {
			if strings.Contains(l, "job/npu-stack-rollout") {
				t.Errorf("%s: %s names the hook-mode Job of the release npu-stack; select the rollout's pods by label (app.kubernetes.io/component=rollout)", f, l)
			}
		}
	}
}

// TestCanaryLabelIsDocumented: an example that selects canaries by a
// label comes with a page that says to put that label on a node.
func TestCanaryLabelIsDocumented(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir(t), "values-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := userDocs(t)
	for _, f := range files {
		up, _ := valuesFile(t, f)["driver"].(map[string]any)["upgradePolicy"].(map[string]any)
		sel, _ := up["canarySelector"].(string)
		if sel == "" {
			continue
		}
		want := "kubectl label node N " + sel
		found := false
		for _, text := range docs {
			found = found || slices.Contains(shLines(text), want)
		}
		if !found {
			t.Errorf("%s selects canaries with %s, but no page's sh block labels one (%s)", filepath.Base(f), sel, want)
		}
	}
}

// TestTableCellsHoldAtMostTwoSentences: tables hold facts; prose goes
// below them.
func TestTableCellsHoldAtMostTwoSentences(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`[^`]*`")
	paren := regexp.MustCompile(`\([^()]*\)`)
	abbrev := regexp.MustCompile(`\b(e\.g|i\.e|etc|vs|cf|l)\.`)
	end := regexp.MustCompile(`[.!?]\s+[A-Z]`)
	for _, f := range files {
		text := readRepo(t, filepath.Join("docs", filepath.Base(f)))
		in := false
		for i, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				in = !in
			}
			if in || !strings.HasPrefix(l, "|") {
				continue
			}
			for _, cell := range strings.Split(strings.Trim(strings.ReplaceAll(l, `\|`, "¦"), "|"), "|") {
				c := code.ReplaceAllString(cell, "C")
				for paren.MatchString(c) {
					c = paren.ReplaceAllString(c, "P")
				}
				c = abbrev.ReplaceAllString(c, "$1")
				if n := len(end.FindAllString(c, -1)) + 1; n > 2 {
					t.Errorf("docs/%s:%d: a table cell of %d sentences; keep the fact in the cell and move the rest below the table: %.80s...", filepath.Base(f), i+1, n, strings.TrimSpace(cell))
				}
			}
		}
	}
}
