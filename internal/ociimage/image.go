// Package ociimage builds npu-stack's images without a Docker daemon: one
// multi-arch OCI image index per binary, each platform's image a single
// layer holding the static binary, built reproducibly so that the same
// binaries and options give the same digests on any machine (docs/releasing.md).
// It also writes them as OCI layouts, pushes them, and reads the binary back
// out of an image (tests and the test bed run what the image ships).
package ociimage

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI annotation keys (image-spec annotations.md) set on every image, its
// config labels and the index, so `crane manifest` or a registry UI shows
// what commit an image came from.
const (
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationVersion  = "org.opencontainers.image.version"
	AnnotationTitle    = "org.opencontainers.image.title"
	AnnotationCreated  = "org.opencontainers.image.created"
	// AnnotationRefName tags an index inside an OCI layout's index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Users is each npu-stack image's uid:gid: npu-rebooter asks the host's
// systemd for reboots over D-Bus, which serves root; the others need no
// privilege. make images and the test bed both take it from here.
var Users = map[string]string{"npu-hooks": "65532:65532", "npu-rebooter": "0:0", "npu-healthwatch": "65532:65532"}

// Options describe the image of one binary.
type Options struct {
	// Name is the binary's name: the image holds /usr/local/bin/<Name>.
	Name string
	// Version is the build version (the Makefile's VERSION), the tag.
	Version string
	// Revision is the git commit, Source the repository URL.
	Revision, Source string
	// User is the config's "uid:gid": "65532:65532" for agents that need no
	// privilege, "0:0" for npu-rebooter, which talks to the host's logind and systemd.
	User string
	// Created is every timestamp in the image (tar entries, config,
	// history, annotation). Zero means the Unix epoch: a timestamp taken
	// from the clock would change the digest of every build.
	Created time.Time
}

// created is opt.Created as written: UTC, whole seconds (tar headers hold
// seconds; a fraction would make the config and the layer disagree).
func (o Options) created() time.Time {
	if o.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return o.Created.UTC().Truncate(time.Second)
}

// annotations are the OCI annotations of the images and the index; empty
// values are left out rather than written as "".
func (o Options) annotations() map[string]string {
	a := map[string]string{
		AnnotationTitle:   o.Name,
		AnnotationCreated: o.created().Format(time.RFC3339),
	}
	for k, v := range map[string]string{AnnotationSource: o.Source, AnnotationRevision: o.Revision, AnnotationVersion: o.Version} {
		if v != "" {
			a[k] = v
		}
	}
	return a
}

// Build makes the image index of one binary: bins maps a platform
// ("linux/amd64", "linux/arm64") to the path of that platform's binary.
// Platforms are added in sorted order, so the index is independent of map
// iteration order.
func Build(bins map[string]string, opt Options) (v1.ImageIndex, error) {
	if opt.Name == "" {
		return nil, errors.New("ociimage: Options.Name is empty")
	}
	if len(bins) == 0 {
		return nil, fmt.Errorf("ociimage: no binaries for %s", opt.Name)
	}
	var adds []mutate.IndexAddendum
	for _, plat := range slices.Sorted(maps.Keys(bins)) {
		p, err := parsePlatform(plat)
		if err != nil {
			return nil, err
		}
		img, err := buildImage(bins[plat], p, opt)
		if err != nil {
			return nil, fmt.Errorf("image %s for %s: %w", opt.Name, plat, err)
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: p},
		})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, opt.annotations()).(v1.ImageIndex), nil
}

// buildImage is one platform's image: an empty OCI image, its config, the
// binary's layer, the annotations.
func buildImage(binPath string, p *v1.Platform, opt Options) (v1.Image, error) {
	created := opt.created()
	layer, err := binaryLayer(opt.Name, binPath, created)
	if err != nil {
		return nil, err
	}
	entry := BinDir + "/" + opt.Name
	cfg := &v1.ConfigFile{
		Created:      v1.Time{Time: created},
		OS:           p.OS,
		Architecture: p.Architecture,
		Variant:      p.Variant,
		Config: v1.Config{
			Entrypoint: []string{entry},
			User:       opt.User,
			// Only our directory: the image has nothing else to run.
			Env:    []string{"PATH=" + BinDir},
			Labels: opt.annotations(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "npu-release: COPY " + opt.Name + " " + entry},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, opt.annotations()).(v1.Image), nil
}

// parsePlatform reads "os/arch[/variant]"; arm64 gets variant v8, as the
// platform of arm64 images conventionally carries (and as containerd
// matches on an arm64 host).
func parsePlatform(s string) (*v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return nil, fmt.Errorf("platform %q: %w", s, err)
	}
	if p.OS == "" || p.Architecture == "" {
		return nil, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", s)
	}
	if p.Architecture == "arm64" && p.Variant == "" {
		p.Variant = "v8"
	}
	return p, nil
}
