package testbed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
)

// fluxArtifacts is the test bed's stand-in for source-controller's
// artifact storage: files under dir served read-only over loopback HTTP.
type fluxArtifacts struct {
	dir  string
	base string // http://127.0.0.1:<port>/
	srv  *http.Server
}

func startFluxArtifacts(cpDir string) (*fluxArtifacts, error) {
	if err := os.MkdirAll(filepath.Join(cpDir, "flux"), 0o755); err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	dir, err := os.MkdirTemp(filepath.Join(cpDir, "flux"), "artifacts-")
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	s := &fluxArtifacts{
		dir:  dir,
		base: "http://" + ln.Addr().String() + "/",
		srv:  &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *fluxArtifacts) close() error { return s.srv.Close() }

// put stores data under rel (slash-separated) and returns its URL.
func (s *fluxArtifacts) put(rel string, data []byte) (string, error) {
	p := filepath.Join(s.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	// Written aside and renamed, so a concurrent download never sees a
	// partial file whose digest would not verify.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", err
	}
	return s.base + rel, nil
}

// PublishChart makes archive the artifact of ExternalArtifact
// namespace/name. archive is a packaged chart, as `helm package`, `make
// chart` and Product.ChartArchive produce: helm-controller hands the bytes
// to Helm's LoadArchive, so a gzipped tar with the chart in one top-level
// directory and nothing else. It is served over loopback at a
// content-addressed path, and the object is created if needed and given
// status.artifact (URL, path, revision, digest sha256:<hex> of the file's
// bytes, which helm-controller verifies while downloading, size,
// lastUpdateTime) and Ready=True, as a source controller would.
//
// helm-controller reacts to a change of revision only, and reads it so:
// with a digest ("sha256:<hex>", or "<chart version>@sha256:<hex>" whose
// version must be the chart's own) the digest's first 12 hex digits become
// the chart version's build metadata (1.2.3+<hex12>), so a changed
// artifact is a new chart version to Helm; a revision without ':' is only
// a label. An empty revision means "sha256:<hex>" of the archive.
func (f *Flux) PublishChart(ctx context.Context, namespace, name, archive, revision string) error {
	data, err := os.ReadFile(archive)
	if err != nil {
		return fmt.Errorf("publish chart: %w", err)
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if revision == "" {
		revision = digest
	}
	// source-controller's layout: <kind>/<namespace>/<name>/<digest>.tgz;
	// earlier revisions stay, so an in-flight download of one still works.
	rel := path.Join("externalartifact", namespace, name, hex.EncodeToString(sum[:])+".tgz")
	url, err := f.store.put(rel, data)
	if err != nil {
		return fmt.Errorf("publish chart: %w", err)
	}
	res := f.dyn.Resource(ExternalArtifactGVR).Namespace(namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			obj = &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": ExternalArtifactGVR.GroupVersion().String(),
				"kind":       "ExternalArtifact",
				"metadata":   map[string]any{"name": name, "namespace": namespace},
				"spec":       map[string]any{},
			}}
			obj, err = res.Create(ctx, obj, metav1.CreateOptions{FieldManager: fluxFieldManager})
		}
		if err != nil {
			return err
		}
		now := metav1.Now().Rfc3339Copy().UTC().Format(time.RFC3339)
		artifact := map[string]any{
			"url":            url,
			"path":           rel,
			"revision":       revision,
			"digest":         digest,
			"size":           int64(len(data)),
			"lastUpdateTime": now,
		}
		ready := map[string]any{
			"type":               "Ready",
			"status":             "True",
			"observedGeneration": obj.GetGeneration(),
			"reason":             "Succeeded",
			"message":            fmt.Sprintf("stored artifact for revision '%s'", revision),
			"lastTransitionTime": now,
		}
		if old := StatusCondition(obj, "Ready"); old != nil && old["status"] == "True" {
			ready["lastTransitionTime"] = old["lastTransitionTime"]
		}
		if err := unstructured.SetNestedField(obj.Object, artifact, "status", "artifact"); err != nil {
			return err
		}
		if err := unstructured.SetNestedSlice(obj.Object, []any{ready}, "status", "conditions"); err != nil {
			return err
		}
		_, err = res.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: fluxFieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("publish chart as ExternalArtifact %s/%s: %w", namespace, name, err)
	}
	return nil
}

// fluxYAMLObjects decodes every non-empty document of a YAML file.
func fluxYAMLObjects(file string) ([]*unstructured.Unstructured, error) {
	r, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode %s: %w", file, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}
