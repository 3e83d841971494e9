package chartpkg

import (
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

func TestChartVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v0.3.0", "0.3.0"},
		{"0.3.0", "0.3.0"},
		{"v1.2.3-rc.1", "1.2.3-rc.1"},
		{"v1.2.3+build.5", "1.2.3+build.5"},
		{"v0.3.0-dirty", "0.3.0-dirty"},
		{"v0.3.0-5-gabc1234", "0.3.0-5-gabc1234"},
		{"v0.3.0-5-gabc1234-dirty", "0.3.0-5-gabc1234-dirty"},
		{"ebb4ef3", "0.0.0-ebb4ef3"},
		{"ebb4ef3-dirty", "0.0.0-ebb4ef3-dirty"},
		{"0123456", "0.0.0-g0123456"},
		{"1234567", "0.0.0-1234567"},
		{"dev", "0.0.0-dev"},
		{"test-1700000000", "0.0.0-test-1700000000"},
		{"v1.2", "0.0.0-v1.2"},
		{"01.2.3", "0.0.0-g01.2.3"},
		{"feature/x_y", "0.0.0-feature-x-y"},
		{"a..b", "0.0.0-a.b"},
		{"", "0.0.0"},
	} {
		got := ChartVersion(tc.in)
		if got != tc.want {
			t.Errorf("ChartVersion(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !semver2.MatchString(got) {
			t.Errorf("ChartVersion(%q) = %q is not SemVer 2", tc.in, got)
		}
	}
}

func TestCheckReleaseVersion(t *testing.T) {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	v := ch.Metadata.Version
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{v, true},                  // Chart.yaml's version and appVersion
		{v + "-rc.1", false},       // Chart.yaml not bumped to it
		{"ebb4ef3", false},         // not SemVer: an untagged build
		{"v" + v + "-3-g1", false}, // a describe past the tag
	} {
		err := CheckReleaseVersion(chartDir, tc.version)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.version, err)
		}
	}
}
