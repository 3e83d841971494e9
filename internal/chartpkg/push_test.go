package chartpkg

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// memRegistry is go-containerregistry's in-memory registry on loopback.
func memRegistry(t *testing.T) (host string, stop func()) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), srv.Close
}

// noCredentials keeps the test away from the user's Helm and Docker logins.
func noCredentials(t *testing.T) PushOptions {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	return PushOptions{CredentialsFile: filepath.Join(t.TempDir(), "config.json")}
}

func TestPush(t *testing.T) {
	opts := noCredentials(t)
	host, _ := memRegistry(t)
	tgz, err := Package(chartDir, "v0.3.0-5-gabc1234", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for _, repo := range []string{"oci://" + host + "/charts", host + "/charts/"} {
		ref, digest, err := Push(context.Background(), tgz, repo, opts)
		if err != nil {
			t.Fatal(err)
		}
		if want := host + "/charts/npu-stack:0.3.0-5-gabc1234"; ref != want {
			t.Errorf("ref %s, want %s", ref, want)
		}
		digests = append(digests, digest)
	}
	if digests[0] != digests[1] || !strings.HasPrefix(digests[0], "sha256:") {
		t.Errorf("two pushes of one package: digests %v", digests)
	}

	// Helm's own client (helm pull, helm install oci://) gets the package back.
	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptCredentialsFile(opts.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := client.Pull(host + "/charts/npu-stack:0.3.0-5-gabc1234")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(tgz)
	if !bytes.Equal(pulled.Chart.Data, data) || pulled.Manifest.Digest != digests[0] {
		t.Errorf("helm pull: %d bytes, manifest %s; pushed %d bytes, %s", len(pulled.Chart.Data), pulled.Manifest.Digest, len(data), digests[0])
	}

	// The registry holds Helm's chart artifact whose one layer is our tgz.
	r, err := name.ParseReference(host + "/charts/npu-stack:0.3.0-5-gabc1234")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest.String() != digests[0] {
		t.Errorf("registry has %s, Push returned %s", desc.Digest, digests[0])
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	if len(m.Layers) != 1 || m.Layers[0].Digest.String() != want || m.Annotations["org.opencontainers.image.created"] != "1970-01-01T00:00:00Z" {
		t.Errorf("manifest layers %+v annotations %v: want the package %s, created at the epoch", m.Layers, m.Annotations, want)
	}
}

func TestPushErrors(t *testing.T) {
	opts := noCredentials(t)
	host, stop := memRegistry(t)
	stop()
	tgz, err := Package(chartDir, "v0.3.0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Push(context.Background(), tgz, "oci://"+host+"/charts", opts)
	if err == nil || !strings.Contains(err.Error(), host+"/charts/npu-stack:0.3.0") || !strings.Contains(err.Error(), "helm registry login "+host) {
		t.Errorf("push to a stopped registry: %v (want the reference and the fix)", err)
	}
	if _, _, err := Push(context.Background(), tgz, "https://"+host+"/charts", opts); err == nil {
		t.Error("an https:// repository was accepted")
	}
	if _, _, err := Push(context.Background(), filepath.Join(t.TempDir(), "none.tgz"), "oci://"+host, opts); err == nil {
		t.Error("a missing package was pushed")
	}
}

func TestIsLoopback(t *testing.T) {
	for repo, want := range map[string]bool{
		"127.0.0.1:5000/charts": true, "localhost:5000/x": true, "localhost/x": true,
		"[::1]:5000/x": true, "ghcr.io/openfuyao": false, "10.0.0.1:5000/x": false,
	} {
		if got := isLoopback(repo); got != want {
			t.Errorf("isLoopback(%q) = %v", repo, got)
		}
	}
}
