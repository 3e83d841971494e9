package chartpkg

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
)

// PushOptions configure Push.
type PushOptions struct {
	// PlainHTTP talks HTTP instead of HTTPS. It is implied for localhost
	// and loopback registries, as go-containerregistry does for the images,
	// so one REGISTRY value serves `make images` and `make chart`.
	PlainHTTP bool
	// CredentialsFile is Helm's registry config (`helm registry login`
	// writes it). Empty: $HELM_REGISTRY_CONFIG, else Helm's default
	// (~/.config/helm/registry/config.json); Helm falls back to the Docker
	// config (~/.docker/config.json, $DOCKER_CONFIG) either way.
	CredentialsFile string
	// Created is the manifest's org.opencontainers.image.created. Zero
	// means the Unix epoch: Helm would use the clock, and a clock time
	// makes every push of the same package a different manifest digest.
	Created time.Time
	// Out receives Helm's "Pushed:"/"Digest:" lines; nil discards them.
	Out io.Writer
}

// Push pushes the packaged chart tgz to the OCI repository ociRepo
// ("oci://host[:port]/path" or "host[:port]/path") with `helm push`
// semantics: the reference is <repo>/<chart name>:<chart version>. It
// returns that reference and the manifest digest. The Helm v3 registry
// client takes no context; ctx is checked before the push starts.
func Push(ctx context.Context, tgz, ociRepo string, opts PushOptions) (ref, digest string, err error) {
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		return "", "", fmt.Errorf("chart push: %w", err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return "", "", fmt.Errorf("chart push: %s is not a chart package: %w", tgz, err)
	}
	repo := strings.TrimSuffix(strings.TrimPrefix(ociRepo, registry.OCIScheme+"://"), "/")
	if repo == "" || strings.Contains(repo, "://") {
		return "", "", fmt.Errorf("chart push: repository %q: want oci://host[:port]/path", ociRepo)
	}
	ref = repo + "/" + ch.Metadata.Name + ":" + ch.Metadata.Version

	var copts []registry.ClientOption
	if opts.PlainHTTP || isLoopback(repo) {
		copts = append(copts, registry.ClientOptPlainHTTP())
	}
	cred := opts.CredentialsFile
	if cred == "" {
		cred = os.Getenv("HELM_REGISTRY_CONFIG")
	}
	if cred != "" {
		copts = append(copts, registry.ClientOptCredentialsFile(cred))
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	copts = append(copts, registry.ClientOptWriter(out))
	client, err := registry.NewClient(copts...)
	if err != nil {
		return "", "", fmt.Errorf("chart push %s: registry client: %w", ref, err)
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	res, err := client.Push(data, ref, registry.PushOptCreationTime(created.UTC().Format(time.RFC3339)))
	if err != nil {
		host, _, _ := strings.Cut(repo, "/")
		return "", "", fmt.Errorf("chart push %s: %w (log in with `helm registry login %s` or docker login; use --plain-http for a registry without TLS)", ref, err, host)
	}
	return res.Ref, res.Manifest.Digest, nil
}

// isLoopback reports whether repo's host is localhost or a loopback IP.
func isLoopback(repo string) bool {
	host, _, _ := strings.Cut(repo, "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
