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
			if c.Name == "" || c.NPU < 0 || c.Chip < 0 || c.Device < -1 || c.RawHealth == "" {
				t.Fatalf("invalid chip %+v", c)
			}
			if c.Health.Usable() && c.Health != HealthOK && c.Health != HealthWarning {
				t.Fatalf("health %q usable", c.Health)
			}
		}
	})
}
