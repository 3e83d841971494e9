package chartpkg

import (
	"fmt"
	"regexp"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

// ImageKeys maps the chart's images.<key> to the binary (and image name)
// it runs.
var ImageKeys = map[string]string{"hooks": "npu-hooks", "rebooter": "npu-rebooter", "healthwatch": "npu-healthwatch"}

// imageBlock matches the registry and repository lines of one of
// npu-stack's images in values.yaml (four-space indent under images.<key>).
var imageBlock = regexp.MustCompile(`(?m)^    registry: \S+\n    repository: \S*/(npu-hooks|npu-rebooter|npu-healthwatch)$`)

// setImagesRepo points the defaults of images.{hooks,rebooter,healthwatch}
// at imagesRepo ("host[:port][/path]": the images are imagesRepo/<binary>,
// where `make images REGISTRY=imagesRepo` pushed them), so the chart a
// release packages pulls that release's images with no value set. It
// edits values.yaml's text (Helm packages the file as written, comments
// included) and checks the result parses to exactly that.
func setImagesRepo(ch *chart.Chart, imagesRepo string) error {
	imagesRepo = strings.TrimSuffix(imagesRepo, "/")
	host, path, _ := strings.Cut(imagesRepo, "/")
	if host == "" || strings.Contains(imagesRepo, "://") {
		return fmt.Errorf("images repository %q: want host[:port][/path]", imagesRepo)
	}
	prefix := ""
	if path != "" {
		prefix = path + "/"
	}
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		n := 0
		f.Data = imageBlock.ReplaceAllFunc(f.Data, func(m []byte) []byte {
			n++
			bin := imageBlock.FindSubmatch(m)[1]
			return fmt.Appendf(nil, "    registry: %s\n    repository: %s%s", host, prefix, bin)
		})
		vals, err := chartutil.ReadValues(f.Data)
		if err != nil {
			return fmt.Errorf("values.yaml after setting the images repository: %w", err)
		}
		for key, bin := range ImageKeys {
			reg, _ := vals.PathValue("images." + key + ".registry")
			repo, _ := vals.PathValue("images." + key + ".repository")
			if reg != host || repo != prefix+bin {
				return fmt.Errorf("values.yaml: images.%s is %v/%v after setting the images repository to %s (%d image blocks matched): keep its registry and repository lines together, four spaces in", key, reg, repo, imagesRepo, n)
			}
		}
		ch.Values = vals
		return nil
	}
	return fmt.Errorf("chart %s has no %s", ch.Name(), chartutil.ValuesfileName)
}

// ImageKeysByBinary is ImageKeys inverted: binary → images.<key>.
func ImageKeysByBinary() map[string]string {
	out := make(map[string]string, len(ImageKeys))
	for k, b := range ImageKeys {
		out[b] = k
	}
	return out
}
