// Command npu-release builds npu-stack's release artifacts without a Docker
// daemon: the multi-arch OCI image of each binary and the OCI chart, both
// reproducible, pushed to a registry or written under .cache (make images,
// make chart), and the npu-hooks tarballs with the release's SHA256SUMS
// (make release). Every artefact line is "<name> <reference or path>
// <digest>".
package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/chartpkg"
	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/internal/relarchive"
)

func main() {
	var opt ociimage.Options
	var binDir, registry, out, chartDir, imagesRepo string
	var plainHTTP bool
	var platforms []string
	root := &cobra.Command{Use: "npu-release", Short: "build and push npu-stack's OCI images and chart", SilenceUsage: true}
	images := &cobra.Command{
		Use:   "images",
		Short: "build one multi-arch image per binary from <bin-dir>/<arch>/<name>; push them or write OCI layouts",
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range slices.Sorted(maps.Keys(ociimage.Users)) {
				bins := map[string]string{}
				for _, p := range platforms {
					bins[p] = filepath.Join(binDir, path.Base(p), name) // linux/arm64 → <bin-dir>/arm64/<name>
				}
				o := opt
				o.Name, o.User = name, ociimage.Users[name]
				idx, err := ociimage.Build(bins, o)
				if err != nil {
					return err
				}
				where, push := filepath.Join(out, name), ociimage.Push
				if plainHTTP {
					push = ociimage.PushPlainHTTP
				}
				if registry == "" {
					err = ociimage.WriteLayout(out, map[string]v1.ImageIndex{name: idx})
				} else {
					where = strings.TrimSuffix(registry, "/") + "/" + name + ":" + opt.Version
					err = push(cmd.Context(), where, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain))
				}
				d, derr := idx.Digest()
				if err = errors.Join(err, derr); err != nil {
					return err
				}
				fmt.Printf("%s %s %s\n", name, where, d)
			}
			return nil
		},
	}
	f := images.Flags()
	f.StringVar(&binDir, "bin-dir", ".cache/release/bin", "directory holding <arch>/<binary> for every platform")
	f.StringVar(&opt.Revision, "revision", "", "git commit (org.opencontainers.image.revision)")
	f.StringVar(&opt.Source, "source", "https://github.com/openfuyao/npu-stack", "source repository URL (org.opencontainers.image.source)")
	f.StringSliceVar(&platforms, "platforms", []string{"linux/amd64", "linux/arm64"}, "platforms of every image")
	f.StringVar(&out, "out", ".cache/images", "without --registry: write one OCI image layout per image under this directory")

	chart := &cobra.Command{
		Use:   "chart",
		Short: "package the chart reproducibly (version from --version); push it to oci://<registry> with --registry",
		RunE: func(cmd *cobra.Command, _ []string) error {
			tgz, err := chartpkg.PackageFor(chartDir, opt.Version, imagesRepo, out)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(tgz)
			if err != nil {
				return err
			}
			fmt.Printf("npu-stack %s sha256:%x\n", tgz, sha256.Sum256(data))
			if registry == "" {
				return nil
			}
			ref, digest, err := chartpkg.Push(cmd.Context(), tgz, "oci://"+registry, chartpkg.PushOptions{PlainHTTP: plainHTTP})
			if err != nil {
				return err
			}
			fmt.Printf("npu-stack %s %s\n", ref, digest)
			return nil
		},
	}
	chart.Flags().StringVar(&chartDir, "chart", "charts/npu-stack", "chart directory")
	chart.Flags().StringVar(&out, "out", ".cache/chart", "directory of the packaged .tgz")
	chart.Flags().StringVar(&imagesRepo, "images-repo", "", "host[:port][/path] holding the images as <path>/<binary>: the packaged chart's default images (empty: keep the chart's)")

	var archPlatforms []string
	archives := &cobra.Command{
		Use:   "archives",
		Short: "write npu-hooks_<version>_<os>_<arch>.tar.gz from <bin-dir>/<os>_<arch>/npu-hooks per platform, then SHA256SUMS over --out",
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("archives: %w", err)
			}
			for _, p := range archPlatforms {
				goos, goarch, ok := strings.Cut(p, "/")
				if !ok {
					return fmt.Errorf("platform %q: want os/arch", p)
				}
				dest := filepath.Join(out, relarchive.ArchiveName("npu-hooks", opt.Version, goos, goarch))
				if err := relarchive.WriteArchive(dest, filepath.Join(binDir, goos+"_"+goarch, "npu-hooks")); err != nil {
					return err
				}
				data, err := os.ReadFile(dest)
				if err != nil {
					return err
				}
				fmt.Printf("npu-hooks-%s-%s %s sha256:%x\n", goos, goarch, dest, sha256.Sum256(data))
			}
			if err := relarchive.WriteSums(out); err != nil {
				return err
			}
			fmt.Printf("checksums %s\n", filepath.Join(out, relarchive.SumsFile))
			return nil
		},
	}
	archives.Flags().StringVar(&binDir, "bin-dir", ".cache/release/bin", "directory holding <os>_<arch>/npu-hooks")
	archives.Flags().StringSliceVar(&archPlatforms, "platforms", []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}, "platforms of the npu-hooks tarballs")
	archives.Flags().StringVar(&out, "out", ".cache/release/dist", "release directory: tarballs and SHA256SUMS (over every file there)")

	check := &cobra.Command{
		Use:   "check-version",
		Short: "refuse a release version that charts/npu-stack/Chart.yaml does not carry as version and appVersion",
		RunE: func(_ *cobra.Command, _ []string) error {
			return chartpkg.CheckReleaseVersion(chartDir, opt.Version)
		},
	}
	check.Flags().StringVar(&chartDir, "chart", "charts/npu-stack", "chart directory")
	check.Flags().StringVar(&opt.Version, "version", "", "release version (required)")
	_ = check.MarkFlagRequired("version")
	root.AddCommand(check)
	archives.Flags().StringVar(&opt.Version, "version", "", "release version, in the tarballs' names (required)")
	_ = archives.MarkFlagRequired("version")
	root.AddCommand(archives)
	for _, c := range []*cobra.Command{images, chart} {
		c.Flags().StringVar(&opt.Version, "version", "", "build version: image tag, chart appVersion, chart version after SemVer cleanup (required)")
		c.Flags().StringVar(&registry, "registry", "", "host[:port]/path to push to; empty: write under --out only")
		c.Flags().BoolVar(&plainHTTP, "plain-http", false, "the registry speaks HTTP, not HTTPS (implied for localhost and 127.0.0.1)")
		_ = c.MarkFlagRequired("version")
		root.AddCommand(c)
	}
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
