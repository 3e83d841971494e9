package npusmi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type chipWant struct {
	npu, chip, device, phyID int
	health                   Health
}

// The layouts are rendered from the format strings of the npu-smi source
// (testdata/README.md): every chip has its own NPU row and therefore its
// own health, also the two chips of an Atlas 300I Duo and the two dies of
// an Atlas A3 card.
func TestParseLayouts(t *testing.T) {
	a3 := make([]chipWant, 0, 16)
	for card := 0; card < 8; card++ {
		for die := 0; die < 2; die++ {
			h := HealthOK
			if card == 5 && die == 1 {
				h = HealthCritical
			}
			a3 = append(a3, chipWant{card, die, -1, card*2 + die, h})
		}
	}
	for _, tc := range []struct {
		file    string
		version string
		name    string
		busID   string // prefix every Bus-Id has
		chips   []chipWant
		bad     int
	}{
		{
			file: "910b-8chips-ok.txt", version: "24.1.rc2", name: "910B3", busID: "0000:",
			chips: []chipWant{{0, 0, -1, -1, HealthOK}, {1, 0, -1, -1, HealthOK}, {2, 0, -1, -1, HealthOK}, {3, 0, -1, -1, HealthOK}, {4, 0, -1, -1, HealthOK}, {5, 0, -1, -1, HealthOK}, {6, 0, -1, -1, HealthOK}, {7, 0, -1, -1, HealthOK}},
		},
		{
			file: "910b-warning-critical.txt", version: "23.0.6", name: "910B4", busID: "0000:",
			chips: []chipWant{{0, 0, -1, -1, HealthOK}, {1, 0, -1, -1, HealthWarning}, {2, 0, -1, -1, HealthCritical}, {3, 0, -1, -1, HealthAlarm}},
			bad:   2,
		},
		{
			file: "a3-16chips-one-critical.txt", version: "25.0.rc1", name: "Ascend910", busID: "0000:",
			chips: a3,
			bad:   1,
		},
		{
			file: "310p-duo.txt", version: "23.0.0", name: "310P3", busID: "0000:",
			chips: []chipWant{{1, 0, 0, -1, HealthOK}, {1, 1, 1, -1, HealthOK}, {2, 0, 2, -1, HealthWarning}, {2, 1, 3, -1, HealthOK}, {4, 0, 4, -1, HealthCritical}, {4, 1, 5, -1, HealthCritical}},
			bad:   2,
		},
		{
			file: "310p-pro-4chips.txt", version: "24.1.0", name: "310P3", busID: "0000:",
			chips: []chipWant{{0, 0, 0, -1, HealthOK}, {1, 0, 1, -1, HealthOK}, {2, 0, 2, -1, HealthOK}, {3, 0, 3, -1, HealthOK}},
		},
		{
			file: "310b-soc.txt", version: "23.0.0", name: "310B1", busID: "NA",
			chips: []chipWant{{0, 0, 0, -1, HealthOK}},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			info, err := Parse(readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if info.Version != tc.version {
				t.Errorf("version %q, want %q", info.Version, tc.version)
			}
			if len(info.Chips) != len(tc.chips) {
				t.Fatalf("%d chips, want %d: %+v", len(info.Chips), len(tc.chips), info.Chips)
			}
			for i, w := range tc.chips {
				c := info.Chips[i]
				if c.NPU != w.npu || c.Chip != w.chip || c.Device != w.device || c.PhyID != w.phyID || c.Health != w.health || c.Name != tc.name || !strings.HasPrefix(c.BusID, tc.busID) {
					t.Errorf("chip %d = %+v, want %+v name %s", i, c, w, tc.name)
				}
			}
			if got := len(info.Unhealthy()); got != tc.bad {
				t.Errorf("%d unhealthy chips, want %d", got, tc.bad)
			}
		})
	}
}

func TestParseRejectsGarbageClearly(t *testing.T) {
	header := "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n" +
		"| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n" +
		"+===========================+===============+====================================================+\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "no chip table"},
		{"driver error", string(readTestdata(t, "error-dcmi.txt")), "dcmi module initialize failed"},
		{"header only", header, "lists no chip"},
		{"bad NPU id", header + "| x     910B3               | OK            | 1 |\n| 0   | 0000:C1:00.0 | 0 |\n", `NPU id "x"`},
		{"NPU without chip row", header + "| 0     910B3               | OK            | 1 |\n+====+\n", "NPU 0 has no chip row"},
		{"bad chip id", header + "| 0     910B3               | OK            | 1 |\n| z   | 0000:C1:00.0 | 0 |\n", `"z" in the chip row of NPU 0`},
		{"stray text", header + "| 0     910B3               | OK            | 1 |\nSegmentation fault\n", "unexpected text"},
		{"one column", header + "| 0     910B3 |\n", "has 1 columns"},
		{"empty health", header + "| 0     910B3 |   | 1 |\n| 0 | 0000:C1:00.0 | 0 |\n", "empty Health"},
		{"unknown chip column", strings.Replace(header, "| Chip       ", "| Chip  Slot ", 1) + "| 0     910B3 | OK | 1 |\n| 0 3 | 0000:C1:00.0 | 0 |\n", `unknown chip columns "Chip  Slot"`},
		{"A3 chip row without Phy-ID", strings.Replace(header, "| Chip         ", "| Chip  Phy-ID ", 1) + "| 0     Ascend910 | OK | 1 |\n| 1 | 0000:9D:00.0 | 0 |\n", "want 2 numbers (the header's Chip Phy-ID columns)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := Parse(nil); !errors.Is(err, ErrNoTable) {
		t.Fatalf("empty output: %v, want ErrNoTable", err)
	}
}

func TestUnknownHealthIsNotUsable(t *testing.T) {
	if ParseHealth("ok") != HealthOK || ParseHealth("NOT_EXIST") != HealthUnknown || HealthUnknown.Usable() || HealthAlarm.Usable() || !HealthWarning.Usable() {
		t.Fatal("health mapping changed")
	}
}

func TestParseCRLF(t *testing.T) {
	in := strings.ReplaceAll(string(readTestdata(t, "310p-duo.txt")), "\n", "\r\n")
	info, err := Parse([]byte(in))
	if err != nil || len(info.Chips) != 6 {
		t.Fatalf("CRLF output: %d chips, %v", len(info.Chips), err)
	}
}
