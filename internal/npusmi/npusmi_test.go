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
	npu, chip, device int
	health            Health
}

func TestParseLayouts(t *testing.T) {
	for _, tc := range []struct {
		file    string
		version string
		name    string
		chips   []chipWant
		bad     int
	}{
		{
			file: "910b-8chips-ok.txt", version: "24.1.rc2", name: "910B3",
			chips: []chipWant{{0, 0, -1, HealthOK}, {1, 0, -1, HealthOK}, {2, 0, -1, HealthOK}, {3, 0, -1, HealthOK}, {4, 0, -1, HealthOK}, {5, 0, -1, HealthOK}, {6, 0, -1, HealthOK}, {7, 0, -1, HealthOK}},
		},
		{
			file: "910b-warning-critical.txt", version: "23.0.6", name: "910B4",
			chips: []chipWant{{0, 0, -1, HealthOK}, {1, 0, -1, HealthWarning}, {2, 0, -1, HealthCritical}, {3, 0, -1, HealthAlarm}},
			bad:   2,
		},
		{
			file: "310p-duo.txt", version: "23.0.0", name: "310P3",
			chips: []chipWant{{1, 0, 0, HealthOK}, {1, 1, 1, HealthOK}, {2, 0, 2, HealthWarning}, {2, 1, 3, HealthWarning}, {4, 0, 4, HealthCritical}, {4, 1, 5, HealthCritical}},
			bad:   2,
		},
		{
			file: "310p-pro-4chips.txt", version: "24.1.0", name: "310P3",
			chips: []chipWant{{0, 0, 0, HealthOK}, {1, 0, 1, HealthOK}, {2, 0, 2, HealthOK}, {3, 0, 3, HealthOK}},
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
				if c.NPU != w.npu || c.Chip != w.chip || c.Device != w.device || c.Health != w.health || c.Name != tc.name || !strings.HasPrefix(c.BusID, "0000:") {
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
