// Package npusmi reads the table `npu-smi info` prints: the chips of a node
// and their health. The layouts are those of the npu-smi source
// (hicann/driver, src/custom/dev_prod/user/npucli/src/npu_info_print.c;
// testdata/README.md cites the format strings, docs/host-contract.md
// section 3 lists them):
//
//   - 910 and 910B: a "Chip" column under "NPU Name", one chip per NPU;
//   - Atlas A3 (910_93): "Chip  Phy-ID", the chip (die) index and its
//     physical ID, two chips per NPU;
//   - 310, 310P and 310B: "Chip  Device", the chip index and its logical
//     ID, one or more chips per NPU; 310B and SoC boards print no process
//     table, and "NA" for a Bus-Id npu-smi cannot read;
//   - 950: "NPU ID | Name", no chip numbers at all.
//
// In every layout each chip has an NPU row of its own (NPU ID, name,
// health) followed by its chip row, so health is per chip. npu-smi leaves
// out either row when a driver query for it fails (layout.go, table.go);
// the chip is still reported.
package npusmi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Health is the value of the Health column.
type Health string

const (
	HealthOK       Health = "OK"
	HealthWarning  Health = "Warning"
	HealthAlarm    Health = "Alarm"
	HealthCritical Health = "Critical"
	// HealthUnknown is any value this parser does not know, npu-smi's own
	// "UNKNOWN", and a chip whose health npu-smi did not print; it counts
	// as unhealthy because a new fault state must not pass as a healthy
	// chip.
	HealthUnknown Health = "Unknown"
)

// NoHealthRow is the RawHealth of a chip whose NPU row npu-smi left out:
// it prints none when the driver reports a health value it has no word for
// (print_card_total_info_first and print_card_total_info_with_HBM_first
// return early; the driver's 0xffffffff for a device that no longer exists
// is one).
const NoHealthRow = "(health not printed)"

// ParseHealth maps a Health cell to a Health, case-insensitively.
func ParseHealth(s string) Health {
	for _, h := range []Health{HealthOK, HealthWarning, HealthAlarm, HealthCritical} {
		if strings.EqualFold(s, string(h)) {
			return h
		}
	}
	return HealthUnknown
}

// Usable reports whether a chip in this state can run work. A Warning
// (a temperature or power notice) still computes; an Alarm or Critical
// chip has a fault that the driver reports as needing a reset.
func (h Health) Usable() bool { return h == HealthOK || h == HealthWarning }

// Chip is one chip of the table.
type Chip struct {
	// NPU is the card ID (the NPU or NPU ID column). For a chip printed
	// without its NPU row it comes from the card's other chips or from the
	// process table; -1 when neither tells it.
	NPU int
	// Chip is the chip's index on its card: the printed one, or, where
	// npu-smi prints none (950, a chip without chip row), the chip's place
	// among the chips of its card, which is the index npu-smi counts.
	Chip int
	// Device is the logical ID from the Device column (310, 310P, 310B),
	// or -1 when the layout has no such column or the chip row is missing.
	Device int
	// PhyID is the physical chip ID from the Phy-ID column (Atlas A3), or
	// -1 when the layout has no such column.
	PhyID int
	// Name is the chip model, such as 910B3 or 310P3; "" when npu-smi
	// printed none (its chip-info query failed, or the NPU row is missing).
	Name string
	// Health is the chip's health, from the NPU row printed above its chip
	// row; HealthUnknown without one.
	Health Health
	// RawHealth is the Health cell as printed, or NoHealthRow.
	RawHealth string
	// BusID is the PCI address from the Bus-Id column; "" when npu-smi
	// printed "NA" (no PCIe information) or no chip row.
	BusID string
}

// Info is the parsed output of `npu-smi info`.
type Info struct {
	// Version is the driver version npu-smi reports ("" if absent).
	Version string
	Chips   []Chip
}

// Unhealthy returns the chips that are not Usable.
func (i Info) Unhealthy() []Chip {
	var bad []Chip
	for _, c := range i.Chips {
		if !c.Health.Usable() {
			bad = append(bad, c)
		}
	}
	return bad
}

// ErrNoTable is returned for output that holds no chip table at all, such
// as the "dcmi module initialize failed" line of a broken driver.
var ErrNoTable = errors.New("no chip table (header with NPU, Name and Health columns) in npu-smi info output")

// Parse reads the output of `npu-smi info`.
func Parse(out []byte) (Info, error) {
	text := string(out)
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	l, first, ver, err := findHeader(lines)
	if err != nil {
		if errors.Is(err, ErrNoTable) {
			return Info{}, fmt.Errorf("%w; got: %s", err, excerpt(text))
		}
		return Info{}, err
	}
	t := table{layout: l}
	procFrom, err := t.read(lines, first)
	if err != nil {
		return Info{}, err
	}
	if len(t.chips) == 0 {
		return Info{}, fmt.Errorf("npu-smi info lists no chip: the %s table is empty (driver loaded without devices?)", l.name)
	}
	if procFrom >= 0 {
		t.nameOrphans(procCards(lines, procFrom))
	} else {
		t.nameOrphans(nil)
	}
	info := Info{Version: ver}
	for _, c := range t.chips {
		info.Chips = append(info.Chips, c.c)
	}
	return info, nil
}

type lineKind int

const (
	lineOther lineKind = iota
	lineBorder
	lineRow
)

// classify takes a trimmed line.
func classify(line string) (lineKind, []string) {
	switch {
	case strings.HasPrefix(line, "+"):
		return lineBorder, nil
	case strings.HasPrefix(line, "|"):
		parts := strings.Split(line, "|")
		// A row "| a | b |" splits into "", " a ", " b ", "": drop the
		// outer empties and trim every cell.
		parts = parts[1:]
		if len(parts) > 0 && strings.TrimSpace(parts[len(parts)-1]) == "" {
			parts = parts[:len(parts)-1]
		}
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return lineRow, parts
	}
	return lineOther, nil
}

// version reads "npu-smi 24.1.rc2   Version: 24.1.rc2".
func version(cells []string) string {
	if len(cells) == 0 {
		return ""
	}
	_, after, ok := strings.Cut(cells[0], "Version:")
	if !ok || !strings.HasPrefix(cells[0], "npu-smi") {
		return ""
	}
	return strings.TrimSpace(after)
}

func excerpt(s string) string {
	s = strings.TrimSpace(s)
	const limit = 120
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return strconv.Quote(s)
}
