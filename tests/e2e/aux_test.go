package e2e_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/chartpkg"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// draName is the stand-in DRA kubelet plugin's chart, release and
// DaemonSet name.
const draName = "dra-plugin"

// auxChart is another chart published like ours: an archive for Flux's
// artifact, an OCI repository for the helm CLIs and Argo CD.
type auxChart struct {
	Name    string
	Archive string
	// Repo is oci://<registry>/<path>; the chart is Repo/Name:Version.
	Repo    string
	Version string
}

func (c *auxChart) Ref() string { return c.Repo + "/" + c.Name }

// publishDRAChart packages testdata/dra-plugin and pushes it to the test
// bed's registry.
func publishDRAChart(ctx context.Context, t *testing.T) *auxChart {
	t.Helper()
	// Beside ours: one repository for Argo CD to trust.
	c := &auxChart{Name: draName, Version: "0.1.0", Repo: "oci://" + env.Registry.Host + "/" + testbed.ChartRepositoryPath}
	var err error
	if c.Archive, err = chartpkg.Package(filepath.Join("testdata", draName), c.Version, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	ref, _, err := chartpkg.Push(ctx, c.Archive, c.Repo, chartpkg.PushOptions{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(ref, ":"+c.Version) {
		t.Fatalf("pushed %s, want version %s", ref, c.Version)
	}
	return c
}
