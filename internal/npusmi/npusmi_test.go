package npusmi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// ok lists single-chip cards 0..n-1 of a layout without Device and Phy-ID
// columns, all healthy.
func ok(n int) []chipWant {
	w := make([]chipWant, n)
	for i := range w {
		w[i] = chipWant{i, 0, -1, -1, HealthOK}
	}
	return w
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
	lost := ok(8)
	lost[3].health = HealthUnknown
	for _, tc := range []struct {
		file    string
		version string
		name    string
		busID   string // prefix every Bus-Id has
		chips   []chipWant
		bad     int
		// unnamed and noBus are the chips printed without a name and
		// without a Bus-Id.
		unnamed, noBus []int
	}{
		{file: "910b-8chips-ok.txt", version: "24.1.rc2", name: "910B3", busID: "0000:", chips: ok(8)},
		{
			file: "910b-warning-critical.txt", version: "23.0.6", name: "910B4", busID: "0000:",
			chips: []chipWant{{0, 0, -1, -1, HealthOK}, {1, 0, -1, -1, HealthWarning}, {2, 0, -1, -1, HealthCritical}, {3, 0, -1, -1, HealthAlarm}},
			bad:   2,
		},
		// NPU 3's row is missing (health 0xffffffff): the process table
		// names the card; NPU 5 has no name.
		{file: "910b-lost-health-empty-name.txt", version: "24.1.rc2", name: "910B3", busID: "0000:", chips: lost, bad: 1, unnamed: []int{3, 5}},
		{file: "910-procs.txt", version: "22.0.4", name: "910ProB", busID: "0000:", chips: ok(4)},
		{file: "a3-16chips-one-critical.txt", version: "25.0.rc1", name: "Ascend910", busID: "0000:", chips: a3, bad: 1},
		{
			// Card 2 stops after die 0: npu-smi prints no more of it.
			file: "a3-phyid-failed.txt", version: "25.0.rc1", name: "Ascend910", busID: "0000:",
			chips: []chipWant{{0, 0, -1, 0, HealthOK}, {0, 1, -1, 1, HealthOK}, {1, 0, -1, 2, HealthOK}, {1, 1, -1, 3, HealthOK}, {2, 0, -1, 4, HealthOK}, {3, 0, -1, 6, HealthOK}, {3, 1, -1, 7, HealthOK}},
		},
		{
			file: "950-v2.txt", version: "26.0.0", name: "Ascend950PR", busID: "0000:",
			chips: []chipWant{{0, 0, -1, -1, HealthOK}, {1, 0, -1, -1, HealthOK}, {2, 0, -1, -1, HealthWarning}, {3, 0, -1, -1, HealthOK}},
		},
		{
			file: "950-v2-ub.txt", version: "26.0.0", name: "Ascend950DT",
			chips: []chipWant{{0, 0, -1, -1, HealthOK}, {1, 0, -1, -1, HealthAlarm}},
			bad:   1, noBus: []int{0, 1},
		},
		{file: "950-legacy-build.txt", version: "26.0.0", name: "Ascend950PR", busID: "0000:", chips: ok(2)},
		{
			file: "310p-duo.txt", version: "23.0.0", name: "310P3", busID: "0000:",
			chips: []chipWant{{1, 0, 0, -1, HealthOK}, {1, 1, 1, -1, HealthOK}, {2, 0, 2, -1, HealthWarning}, {2, 1, 3, -1, HealthOK}, {4, 0, 4, -1, HealthCritical}, {4, 1, 5, -1, HealthCritical}},
			bad:   2,
		},
		{
			// NPU 1 chip 1 has no chip row (its position gives the
			// index); NPU 2 chip 0 has no NPU row (its card mate names
			// the card); NPU 3 chip 1 has no name.
			file: "310p-duo-faults.txt", version: "24.1.0", name: "310P3", busID: "0000:",
			chips: []chipWant{{1, 0, 0, -1, HealthOK}, {1, 1, -1, -1, HealthOK}, {2, 0, 2, -1, HealthUnknown}, {2, 1, 3, -1, HealthOK}, {3, 0, 4, -1, HealthOK}, {3, 1, 5, -1, HealthOK}},
			bad:   1, unnamed: []int{2, 5}, noBus: []int{1},
		},
		{
			file: "310p-pro-4chips.txt", version: "24.1.0", name: "310P3", busID: "0000:",
			chips: []chipWant{{0, 0, 0, -1, HealthOK}, {1, 0, 1, -1, HealthOK}, {2, 0, 2, -1, HealthOK}, {3, 0, 3, -1, HealthOK}},
		},
		{file: "310p-windows.txt", version: "24.1.0", name: "310P3", busID: "0000:", chips: []chipWant{{0, 0, 0, -1, HealthOK}}},
		{
			file: "310-4chips.txt", version: "21.0.4", name: "310", busID: "0000:",
			chips: []chipWant{{0, 0, 0, -1, HealthOK}, {0, 1, 1, -1, HealthOK}, {0, 2, 2, -1, HealthOK}, {0, 3, 3, -1, HealthOK}, {1, 0, 4, -1, HealthOK}, {1, 1, 5, -1, HealthOK}, {1, 2, 6, -1, HealthOK}, {1, 3, 7, -1, HealthOK}},
		},
		{file: "310-soc-na.txt", version: "21.0.4", name: "310", chips: []chipWant{{0, 0, 0, -1, HealthOK}}, noBus: []int{0}},
		{file: "310b-soc.txt", version: "23.0.0", name: "310B1", chips: []chipWant{{0, 0, 0, -1, HealthOK}}, noBus: []int{0}},
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
				name, bus := tc.name, tc.busID
				if slices.Contains(tc.unnamed, i) {
					name = ""
				}
				busOK := strings.HasPrefix(c.BusID, bus) && c.BusID != ""
				if slices.Contains(tc.noBus, i) {
					busOK = c.BusID == ""
				}
				if c.NPU != w.npu || c.Chip != w.chip || c.Device != w.device || c.PhyID != w.phyID || c.Health != w.health || c.Name != name || !busOK {
					t.Errorf("chip %d = %+v, want %+v name %q", i, c, w, name)
				}
				if c.RawHealth == "" {
					t.Errorf("chip %d has no RawHealth", i)
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
	b950 := readTestdata(t, "950-v2.txt")
	header950 := string(b950[:bytes.Index(b950, []byte("| 0      |"))])
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
		{"two chip rows without border", header + "| 0     910B3 | OK | 1 |\n| 0 | 0000:C1:00.0 | 0 |\n| 1 | 0000:C2:00.0 | 0 |\n", "second chip row after line 5"},
		{"NPU row after chip row", header + "| 0 | 0000:C1:00.0 | 0 |\n| 0     910B3 | OK | 1 |\n", "NPU row after the row of line 4"},
		{"NPU row with an extra column", header + "| 0     910B3 | OK | 1 | 2 |\n| 0 | 0000:C1:00.0 | 0 |\n", "has 4 columns, want 3 (910/910B layout)"},
		{"no second header line", strings.SplitAfter(header, "\n")[0] + "| 0     910B3 | OK | 1 |\n", `want "| Chip ... | Bus-Id | ..."`},
		{"no border under the header", strings.Join(strings.SplitAfter(header, "\n")[:2], "") + "| 0     910B3 | OK | 1 |\n", "want the +===+ border under the 910/910B header"},
		{"950 header without Bus-Id line", header950[:strings.Index(header950, "|        |")] + "| 0      | Ascend950PR | OK | 1 |\n", `want "|        |                  | Bus-Id | ..."`},
		{"950 chip row with a name", header950 + "| 0      | Ascend950PR | OK | 1 |\n|        | x | 0000:06:00.0 | 0 |\n", "want two empty cells, then the Bus-Id (950 layout)"},
		{"950 NPU row with 5 columns", header950 + "| 0 | Ascend950PR | OK | 1 | 2 |\n", "has 5 columns, want 3 or 4 (950 layout)"},
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

// A chip npu-smi printed without its NPU row (a health value it has no
// word for) is an unhealthy chip of unknown name; its card's ID comes from
// the card's other chips or the process table, and only when that cannot
// be wrong.
func TestChipWithoutNPURow(t *testing.T) {
	drop := func(file, row string) string {
		t.Helper()
		in := string(readTestdata(t, file))
		if !strings.Contains(in, row) {
			t.Fatalf("%s has no row %q", file, row)
		}
		return strings.Replace(in, row, "", 1)
	}
	duo := string(readTestdata(t, "310p-duo-faults.txt"))
	duoNoProc := duo[:strings.Index(duo, "+-------------------------------+-----------------+------------------------------------------------------+\n| NPU     Chip")]
	npu := func(id int) string {
		return fmt.Sprintf("| No running processes found in NPU %-7d                      "+
			"                                 |\n", id)
	}
	swapped := strings.Replace(strings.Replace(strings.Replace(string(readTestdata(t, "910b-lost-health-empty-name.txt")),
		npu(0), "SWAP", 1), npu(1), npu(0), 1), "SWAP", npu(1), 1)
	for _, tc := range []struct {
		name, in string
		index    int // of the chip without NPU row
		npu      int
	}{
		// The NPU_SMI_V2 process table names the card by its process row.
		{"950 named by its process", drop("950-v2.txt", "| 1      | Ascend950PR      | OK            | 309.5       45                0     / 0             |\n"), 1, 1},
		// 310B prints no process table and the card has no other chip.
		{"310B unnamed", drop("310b-soc.txt", "| 0       310B1                 | OK              | 8.5          52                15    / 15            |\n"), 0, -1},
		// Without a process table (SoC boards) the card's other chip
		// names it.
		{"310P named by its card mate", duoNoProc, 2, 2},
		// A process table that disagrees with the chip table names none.
		{"process table out of order", swapped, 3, -1},
		// Card 2 of this A3 stopped halfway, without its +===+ border:
		// cards 2 and 3 share a block, and the process table's sections
		// no longer line up with the chip table's cards.
		{"A3 after a card cut short", drop("a3-phyid-failed.txt", "| 3     Ascend910           | OK            | 168.0       37                0     / 0             |\n"), 5, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			c := info.Chips[tc.index]
			if c.NPU != tc.npu || c.Health != HealthUnknown || c.RawHealth != NoHealthRow || c.Name != "" {
				t.Fatalf("chip %d = %+v, want NPU %d, health unknown", tc.index, c, tc.npu)
			}
			if bad := info.Unhealthy(); len(bad) != 1 || bad[0] != c {
				t.Fatalf("unhealthy %+v, want only %+v", bad, c)
			}
		})
	}
}
