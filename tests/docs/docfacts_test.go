package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// userDocs are the files a user of a release reads: the pages, the
// README, the chart's README, values and templates (comments included).
func userDocs(t *testing.T) map[string]string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	for _, g := range []string{"docs/*.md", "README.md", "charts/npu-stack/*.md", "charts/npu-stack/values.yaml", "charts/npu-stack/templates/*"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		out[rel] = string(b)
	}
	return out
}

// TestDocsCiteOnlyWhatUsersHave: the design notes and the seed documents
// the project was built from are not shipped; a page that sends the user
// there sends them nowhere. The public pages the seeds are copies of are
// cited by their titles and addresses instead (host-contract.md, ANO-UPG
// and ANO-INTRO).
func TestDocsCiteOnlyWhatUsersHave(t *testing.T) {
	unshipped := regexp.MustCompile(`DESIGN\.md|/work/|seed Step|the seed's|seed contract|SEED-\d`)
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if m := unshipped.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q, which users do not have: %s", f, i+1, m, line)
			}
		}
	}
}

var setDriverVersion = regexp.MustCompile(`driver\.version=([0-9][0-9.]*)`)

// TestUpgradeExamplesChangeTheVersion: a documented `helm upgrade --set
// driver.version=V` upgrades only a fleet that runs another version, so
// the page must name another one before it, or upgrade to a version other
// than the chart's default (a fleet installed with the defaults).
func TestUpgradeExamplesChangeTheVersion(t *testing.T) {
	vals := valuesFile(t, filepath.Join(repoRoot(t), "charts", "npu-stack", "values.yaml"))
	def, _ := vals["driver"].(map[string]any)["version"].(string)
	if def == "" {
		t.Fatal("values.yaml has no driver.version")
	}
	for f, text := range userDocs(t) {
		lines := strings.Split(text, "\n")
		for i, line := range lines {
			if !strings.Contains(line, "helm upgrade ") || strings.Contains(line, "--install") {
				continue
			}
			m := setDriverVersion.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			other := m[1] != def
			for _, before := range lines[:i] {
				for _, w := range setDriverVersion.FindAllStringSubmatch(before, -1) {
					other = other || w[1] != m[1]
				}
			}
			if !other {
				t.Errorf("%s:%d upgrades to driver %s, but nothing before it installs another version (the chart's default is %s): %s", f, i+1, m[1], def, strings.TrimSpace(line))
			}
		}
	}
}

// TestFluxRunsHookMode: Flux runs Helm's hooks, so docs/deployers.md
// gives it hooks.mode hook and the Flux example sets no job mode; no
// other text may say job mode is for Flux.
func TestFluxRunsHookMode(t *testing.T) {
	jobForFlux := regexp.MustCompile(`(?i)job[^.\n]*\((Argo CD, )?Flux|Argo CD and Flux create`)
	for f, text := range userDocs(t) {
		if m := jobForFlux.FindString(text); m != "" {
			t.Errorf("%s says job mode is for Flux (%q); Flux uses hook mode (docs/deployers.md)", f, m)
		}
	}
	flux, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "examples", "flux-helmrelease.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^\s+mode: job`).Match(flux) {
		t.Error("docs/examples/flux-helmrelease.yaml sets hooks.mode: job")
	}
}

var chartVersionFlag = regexp.MustCompile(`oci://(ghcr\.io|registry\.example\.com)/openfuyao/charts/npu-stack (--version (\S+))?`)

// TestPinnedVersionsAreWhatTheReleasePublishes: make release publishes
// only the version Chart.yaml carries (tools/npu-release check-version),
// so every documented install of the published chart names that version,
// and the Flux and Argo CD examples ask for it.
func TestPinnedVersionsAreWhatTheReleasePublishes(t *testing.T) {
	ch, err := loader.LoadDir(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatal(err)
	}
	v := ch.Metadata.Version
	for f, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if !strings.Contains(line, "helm ") {
				continue
			}
			for _, m := range chartVersionFlag.FindAllStringSubmatch(line, -1) {
				if m[3] != v {
					t.Errorf("%s:%d installs the published chart at %q, not %s (Chart.yaml): %s", f, i+1, m[3], v, strings.TrimSpace(line))
				}
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(examplesDir(t), "argocd-application.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^\s+targetRevision: (\S+)$`).FindSubmatch(b); m == nil || string(m[1]) != v {
		t.Errorf("argocd-application.yaml targetRevision %q, want %s", m, v)
	}
	b, err = os.ReadFile(filepath.Join(examplesDir(t), "flux-helmrelease.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+semver: "?([^"\n]+)"?$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("flux-helmrelease.yaml has no semver")
	}
	c, err := semver.NewConstraint(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Check(semver.MustParse(v)) {
		t.Errorf("flux-helmrelease.yaml semver %q does not take %s", m[1], v)
	}
}
