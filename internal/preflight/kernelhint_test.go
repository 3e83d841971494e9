package preflight

import (
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func TestKernelHint(t *testing.T) {
	const full = "6.6.0-145.0.4.135.oe2403sp3.aarch64"
	tagForm := Profile{Name: "oe", Chip: "910b", Kernel: "6.6.0-145.0.4.135", OS: "oe2403sp3"}
	labels := func(chip, kernel, os string) map[string]string {
		return map[string]string{contract.LabelChip: chip, contract.LabelKernel: kernel, contract.LabelOS: os}
	}
	for name, tc := range map[string]struct {
		node     map[string]string
		profiles []Profile
		want     []string // "" entries: no hint
	}{
		"tag form of the kernel": {labels("910b", full, "oe2403sp3"), []Profile{tagForm},
			[]string{"profile oe", `"6.6.0-145.0.4.135"`, `set the profile's kernel to "` + full + `"`, `imageKernel to "6.6.0-145.0.4.135"`}},
		"other chip":          {labels("310p", full, "oe2403sp3"), []Profile{tagForm}, nil},
		"other os":            {labels("910b", full, "oe2403sp1"), []Profile{tagForm}, nil},
		"unrelated kernel":    {labels("910b", "5.15.0-105-generic", "oe2403sp3"), []Profile{tagForm}, nil},
		"no kernel label":     {labels("910b", "", "oe2403sp3"), []Profile{tagForm}, nil},
		"second profile hits": {labels("910b", full, "oe2403sp3"), []Profile{{Name: "u", Chip: "910b", Kernel: "5.15", OS: "ubuntu22.04"}, tagForm}, []string{"profile oe"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := kernelHint(tc.node, tc.profiles, ProfileLabels{Chip: contract.LabelChip, Kernel: contract.LabelKernel, OS: contract.LabelOS})
			if tc.want == nil {
				if got != "" {
					t.Fatalf("hint %q, want none", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("hint %q lacks %q", got, w)
				}
			}
		})
	}
}
