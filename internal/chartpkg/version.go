// Package chartpkg packages charts/npu-stack as a reproducible .tgz stamped
// with the build version and pushes it as an OCI artifact, as `helm
// package` and `helm push` would (docs/releasing.md: the chart ships as an
// OCI artifact to any registry the user names).
package chartpkg

import (
	"fmt"
	"regexp"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// semver2 is the regular expression semver.org gives for SemVer 2.0.0.
// Helm itself accepts looser versions ("1.2", "v1.2.3"), but an OCI chart
// tag and tools comparing chart versions expect the strict form.
var semver2 = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// ChartVersion turns a build version (the Makefile's VERSION, from `git
// describe --tags --always --dirty`) into the chart's SemVer 2 version:
//
//   - a SemVer after an optional leading "v" is kept: "v0.3.0" → "0.3.0",
//     and a describe past a tag stays readable: "v0.3.0-5-gabc1234-dirty"
//     → "0.3.0-5-gabc1234-dirty" (a valid pre-release);
//   - anything else (a bare hash "ebb4ef3", "dev", a branch name) becomes a
//     pre-release of 0.0.0: "0.0.0-ebb4ef3", characters SemVer forbids
//     turned into "-", and a numeric identifier with a leading zero (a hash
//     such as "0123456") prefixed with "g" as git describe does.
//
// The appVersion keeps the build version unchanged: the chart's image tags
// default to it and `make images` tags the images with it.
func ChartVersion(buildVersion string) string {
	if v := strings.TrimPrefix(buildVersion, "v"); semver2.MatchString(v) {
		return v
	}
	var ids []string
	for id := range strings.SplitSeq(buildVersion, ".") {
		id = strings.Map(func(r rune) rune {
			if r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
				return r
			}
			return '-'
		}, id)
		if id == "" {
			continue
		}
		if len(id) > 1 && id[0] == '0' && strings.Trim(id, "0123456789") == "" {
			id = "g" + id
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return "0.0.0"
	}
	return "0.0.0-" + strings.Join(ids, ".")
}

// CheckReleaseVersion reports whether a release may be built at version
// from the chart in chartDir: the chart's own version and appVersion in
// Chart.yaml must be ChartVersion(version) and version, so that the
// chart of the release's tag, installed from a checkout, pulls the
// release's images, and the documents and examples that name the chart
// version (tests/docs) name what the release publishes.
func CheckReleaseVersion(chartDir, version string) error {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	want := ChartVersion(version)
	if want != strings.TrimPrefix(version, "v") {
		return fmt.Errorf("release version %q is not SemVer (x.y.z[-pre]); a build of an untagged commit is a pre-release of make images / make chart, not a release", version)
	}
	if ch.Metadata.Version != want || ch.Metadata.AppVersion != version {
		return fmt.Errorf("release %s: %s/Chart.yaml has version %q and appVersion %q; set both to %q first (and the documented --version pins, tests/docs checks them)", version, chartDir, ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	return nil
}
