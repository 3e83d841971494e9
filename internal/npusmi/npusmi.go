// Package npusmi reads the table `npu-smi info` prints: the chips of a node
// and their health. The layouts are those of the npu-smi source
// (hicann/driver, src/custom/dev_prod/user/npucli/src/npu_info_print.c;
// testdata/README.md cites the format strings):
//
//   - 910B: a "Chip" column under "NPU Name", one chip per NPU;
//   - Atlas A3 (910_93): "Chip  Phy-ID", the chip (die) index and its
//     physical ID, two chips per NPU;
//   - 310P and 310B: "Chip  Device", the chip index and its logical ID,
//     one chip per NPU (two on an Atlas 300I Duo); 310B prints no process
//     table and "NA" for a Bus-Id it cannot read.
//
// In every layout each chip has an NPU row of its own (NPU ID, name,
// health) followed by its chip row, so health is per chip.
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
	// HealthUnknown is any value this parser does not know; it counts as
	// unhealthy because a new fault state must not pass as a healthy chip.
	HealthUnknown Health = "Unknown"
)

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
	// NPU is the card ID (the NPU column).
	NPU int
	// Chip is the chip's index on its card.
	Chip int
	// Device is the logical ID from the Device column (310P, 310B), or -1
	// when the layout has no such column (910B, A3).
	Device int
	// PhyID is the physical chip ID from the Phy-ID column (Atlas A3), or
	// -1 when the layout has no such column.
	PhyID int
	// Name is the chip model, such as 910B3 or 310P3.
	Name string
	// Health is the chip's health, from the NPU row printed above its chip
	// row.
	Health Health
	// RawHealth is the Health cell as printed.
	RawHealth string
	BusID     string
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
	p := parser{info: Info{}}
	return p.parse(string(out))
}

type parser struct {
	info Info
	// second is the column after Chip in the header ("Device",
	// "Phy-ID"), "" when the header has only Chip.
	second string
}

// Columns that may follow Chip in the header's second line.
const (
	colDevice = "Device"
	colPhyID  = "Phy-ID"
)

type lineKind int

const (
	lineOther lineKind = iota
	lineBorder
	lineRow
)

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

func (p *parser) parse(text string) (Info, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	header := -1
	for i, raw := range lines {
		kind, cells := classify(strings.TrimSpace(raw))
		if kind != lineRow {
			continue
		}
		if p.info.Version == "" {
			p.info.Version = version(cells)
		}
		if isHeader(cells) {
			header = i
			break
		}
	}
	if header < 0 {
		return Info{}, fmt.Errorf("%w; got: %s", ErrNoTable, excerpt(text))
	}
	i := header + 1
	if i < len(lines) {
		if kind, cells := classify(strings.TrimSpace(lines[i])); kind == lineRow && len(cells) > 0 {
			fields := strings.Fields(cells[0])
			if len(fields) > 0 && fields[0] == "Chip" {
				if len(fields) > 1 {
					p.second = fields[1]
				}
				if len(fields) > 2 || (p.second != "" && p.second != colDevice && p.second != colPhyID) {
					return Info{}, fmt.Errorf("header line %d: unknown chip columns %q; known: \"Chip\", \"Chip %s\" and \"Chip %s\"", i+1, cells[0], colDevice, colPhyID)
				}
				i++
			}
		}
	}
	if err := p.rows(lines, i); err != nil {
		return Info{}, err
	}
	if len(p.info.Chips) == 0 {
		return Info{}, fmt.Errorf("npu-smi info lists no chip: the table is empty (driver loaded without devices?)")
	}
	return p.info, nil
}

// rows reads the chip blocks: each starts after a border with an NPU row,
// followed by its chip row (npu-smi prints one; more are read as chips
// sharing the NPU row's health). The process table that follows the chip
// table ends it; 310B prints none, and the output ends after its table.
func (p *parser) rows(lines []string, from int) error {
	var card *Chip // the NPU row of the current block
	chipsInBlock := 0
	endBlock := func(line int) error {
		if card != nil && chipsInBlock == 0 {
			return fmt.Errorf("line %d: NPU %d has no chip row", line, card.NPU)
		}
		card, chipsInBlock = nil, 0
		return nil
	}
	for n := from; n < len(lines); n++ {
		lineNo := n + 1
		kind, cells := classify(strings.TrimSpace(lines[n]))
		switch kind {
		case lineOther:
			if strings.TrimSpace(lines[n]) == "" {
				continue
			}
			return fmt.Errorf("line %d: unexpected text %q inside the chip table", lineNo, excerpt(lines[n]))
		case lineBorder:
			if err := endBlock(lineNo); err != nil {
				return err
			}
			continue
		}
		if isProcessHeader(cells) {
			return endBlock(lineNo)
		}
		if len(cells) < 2 {
			return fmt.Errorf("line %d: row %q has %d columns, want at least 2", lineNo, excerpt(lines[n]), len(cells))
		}
		if card == nil {
			c, err := npuRow(cells, lineNo)
			if err != nil {
				return err
			}
			card = &c
			continue
		}
		chip, err := p.chipRow(*card, cells, lineNo)
		if err != nil {
			return err
		}
		p.info.Chips = append(p.info.Chips, chip)
		chipsInBlock++
	}
	return endBlock(len(lines))
}

func npuRow(cells []string, line int) (Chip, error) {
	fields := strings.Fields(cells[0])
	if len(fields) != 2 {
		return Chip{}, fmt.Errorf("line %d: NPU row %q: want \"<NPU id> <name>\"", line, cells[0])
	}
	id, err := strconv.Atoi(fields[0])
	if err != nil || id < 0 {
		return Chip{}, fmt.Errorf("line %d: NPU id %q is not a non-negative number", line, fields[0])
	}
	if cells[1] == "" {
		return Chip{}, fmt.Errorf("line %d: NPU %d has an empty Health column", line, id)
	}
	return Chip{NPU: id, Name: fields[1], Health: ParseHealth(cells[1]), RawHealth: cells[1], Device: -1, PhyID: -1}, nil
}

func (p *parser) chipRow(card Chip, cells []string, line int) (Chip, error) {
	fields := strings.Fields(cells[0])
	want := 1
	if p.second != "" {
		want = 2
	}
	if len(fields) != want {
		return Chip{}, fmt.Errorf("line %d: chip row %q of NPU %d: want %d numbers (the header's Chip %s columns)", line, cells[0], card.NPU, want, p.second)
	}
	nums := make([]int, len(fields))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return Chip{}, fmt.Errorf("line %d: %q in the chip row of NPU %d is not a non-negative number", line, f, card.NPU)
		}
		nums[i] = v
	}
	c := card
	c.Chip = nums[0]
	switch p.second {
	case colDevice:
		c.Device = nums[1]
	case colPhyID:
		c.PhyID = nums[1]
	}
	c.BusID = cells[1]
	return c, nil
}

func isHeader(cells []string) bool {
	if len(cells) < 2 {
		return false
	}
	f := strings.Fields(cells[0])
	return len(f) >= 2 && f[0] == "NPU" && f[1] == "Name" && cells[1] == "Health"
}

func isProcessHeader(cells []string) bool {
	for _, c := range cells {
		if strings.HasPrefix(c, "Process id") {
			return true
		}
	}
	return false
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
