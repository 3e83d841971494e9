package npusmi

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: whatever a broken driver or a future npu-smi prints, the
// health-watch must get an error or chips, never a crash. The checked-in
// corpus lives in testdata/fuzz/FuzzParse; the real outputs are seeds too.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		info, err := Parse(in)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if len(info.Chips) == 0 {
			t.Fatal("success without chips")
		}
		for _, c := range info.Chips {
			// NPU -1 and an empty name are only for a chip npu-smi printed
			// without its NPU row, and that chip must not pass as healthy.
			orphan := c.RawHealth == NoHealthRow
			if c.NPU < -1 || (c.NPU == -1 && !orphan) || c.Chip < 0 || c.Device < -1 || c.PhyID < -1 || c.RawHealth == "" {
				t.Fatalf("invalid chip %+v", c)
			}
			if orphan && (c.Health != HealthUnknown || c.Name != "") {
				t.Fatalf("chip without NPU row has health or name: %+v", c)
			}
			if c.Health.Usable() && c.Health != HealthOK && c.Health != HealthWarning {
				t.Fatalf("health %q usable", c.Health)
			}
		}
	})
}
