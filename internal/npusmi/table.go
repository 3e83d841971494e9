package npusmi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// table reads the chip table under the header. Every layout prints the
// same shape (print_card_total_info, print_card_total_info_with_HBM): per
// chip an NPU row, then a chip row; a +---+ line between the chips of a
// card and a +===+ border after each card. npu-smi leaves out the NPU row
// when the chip's health has no name, and (310 layout) the chip row when
// its logical ID cannot be read, so a row is told apart by its own cells,
// not by its place: a chip row has a Bus-Id where an NPU row has the
// health.
type table struct {
	layout layout
	chips  []tableChip
	// cards counts the +===+ borders read so far: the card block a chip
	// is in, which the process table can name (nameOrphans).
	cards int
}

type tableChip struct {
	c    Chip
	card int
	// orphan: printed without its NPU row, so without NPU ID and health.
	orphan bool
}

// entry is what was read of one chip since the last border.
type entry struct {
	npu      *Chip
	npuLine  int
	chip     *chipRow
	chipLine int
}

type chipRow struct {
	index  int // -1 when the layout prints none (950)
	second int // Device or Phy-ID, -1 without one
	bus    string
}

// busID is how print_card_total_info_second and _with_HBM_second print a
// PCI address ("%04X:%02X:%02X.%-4X", "%04X:%02X:%02X.%-2X").
var busID = regexp.MustCompile(`^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]{1,2}$`)

// busNA is the Bus-Id of a chip without PCIe information.
const busNA = "NA"

func isBusID(s string) bool { return s == busNA || busID.MatchString(s) }

// read reads the chip table from line index from. It returns the index of
// the line after the process table's header, or -1 when the output has no
// process table (310B, SoC boards).
func (t *table) read(lines []string, from int) (int, error) {
	var e entry
	pos := 0 // chips read so far in this card
	flush := func(lineNo int) error {
		c, ok, err := t.build(e, pos, lineNo)
		e = entry{}
		if err != nil || !ok {
			return err
		}
		t.chips = append(t.chips, c)
		pos++
		return nil
	}
	for n := from; n < len(lines); n++ {
		lineNo := n + 1
		line := strings.TrimSpace(lines[n])
		kind, cells := classify(line)
		switch kind {
		case lineOther:
			if line == "" {
				continue
			}
			return -1, fmt.Errorf("line %d: unexpected text %s inside the %s chip table", lineNo, excerpt(line), t.layout.name)
		case lineBorder:
			if err := flush(lineNo); err != nil {
				return -1, err
			}
			if isCardEnd(line) {
				t.cards++
				pos = 0
			}
			continue
		}
		if isProcessHeader(cells) {
			return n + 1, flush(lineNo)
		}
		if err := t.row(&e, cells, lineNo, line); err != nil {
			return -1, err
		}
	}
	return -1, flush(len(lines))
}

func (t *table) row(e *entry, cells []string, lineNo int, line string) error {
	l := t.layout
	if len(cells) < 2 {
		return fmt.Errorf("line %d: row %s has %d columns, want at least 2", lineNo, excerpt(line), len(cells))
	}
	if l.isChipRow(cells) {
		if e.chip != nil {
			return fmt.Errorf("line %d: a second chip row after line %d without a border between (npu-smi prints one per chip)", lineNo, e.chipLine)
		}
		r, err := l.chipRow(cells, e.npu, lineNo, line)
		if err != nil {
			return err
		}
		e.chip, e.chipLine = &r, lineNo
		return nil
	}
	if e.npu != nil || e.chip != nil {
		prev := e.npuLine
		if e.chip != nil {
			prev = e.chipLine
		}
		return fmt.Errorf("line %d: an NPU row after the row of line %d without a border between (npu-smi prints an NPU row, then its chip row, then a border)", lineNo, prev)
	}
	c, err := l.npuRow(cells, lineNo, line)
	if err != nil {
		return err
	}
	e.npu, e.npuLine = &c, lineNo
	return nil
}

// isChipRow: 950 prints the chip row's first two cells empty
// (print_chip_info "|%-8s|%-18s| "); the other layouts print chip numbers
// where the NPU row has its ID and name, and the Bus-Id where the NPU row
// has the health.
func (l layout) isChipRow(cells []string) bool {
	if l.v950 {
		return cells[0] == ""
	}
	return isBusID(cells[1])
}

func (l layout) npuRow(cells []string, lineNo int, line string) (Chip, error) {
	idCell, name, health := cells[0], "", ""
	switch {
	case len(cells) == 3:
		// "| %-5d %-20s| %-13s |..." and "| %-7d %-22s| %-15s |...": ID
		// and name share a cell; the name is empty when the chip-info
		// query failed.
		health = cells[1]
		fields := strings.Fields(idCell)
		if len(fields) == 0 {
			return Chip{}, fmt.Errorf("line %d: NPU row %q: want \"<NPU id> <name>\"", lineNo, idCell)
		}
		idCell, name = fields[0], strings.TrimSpace(strings.TrimPrefix(cells[0], fields[0]))
	case len(cells) == 4 && l.v950:
		// NPU_SMI_V2: "| %-7d| %-17s| %-13s |...".
		name, health = cells[1], cells[2]
	default:
		want := "3"
		if l.v950 {
			want = "3 or 4"
		}
		return Chip{}, fmt.Errorf("line %d: NPU row %s has %d columns, want %s (%s layout)", lineNo, excerpt(line), len(cells), want, l.name)
	}
	id, err := strconv.Atoi(idCell)
	if err != nil || id < 0 {
		return Chip{}, fmt.Errorf("line %d: NPU id %q is not a non-negative number", lineNo, idCell)
	}
	if health == "" {
		return Chip{}, fmt.Errorf("line %d: NPU %d has an empty Health column", lineNo, id)
	}
	return Chip{NPU: id, Name: name, Health: ParseHealth(health), RawHealth: health, Device: -1, PhyID: -1}, nil
}

func (l layout) chipRow(cells []string, npu *Chip, lineNo int, line string) (chipRow, error) {
	of := ""
	if npu != nil {
		of = fmt.Sprintf(" of NPU %d", npu.NPU)
	}
	if l.v950 {
		if len(cells) != 4 || cells[1] != "" || !isBusID(cells[2]) {
			return chipRow{}, fmt.Errorf("line %d: chip row %s%s: want two empty cells, then the Bus-Id (950 layout)", lineNo, excerpt(line), of)
		}
		return chipRow{index: -1, second: -1, bus: bus(cells[2])}, nil
	}
	if len(cells) != 3 {
		return chipRow{}, fmt.Errorf("line %d: chip row %s%s has %d columns, want 3 (%s layout)", lineNo, excerpt(line), of, len(cells), l.name)
	}
	fields := strings.Fields(cells[0])
	want := 1
	if l.second != "" {
		want = 2
	}
	if len(fields) != want {
		return chipRow{}, fmt.Errorf("line %d: chip row %q%s: want %d numbers (the header's Chip %s columns)", lineNo, cells[0], of, want, l.second)
	}
	nums := make([]int, len(fields))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return chipRow{}, fmt.Errorf("line %d: %q in the chip row%s is not a non-negative number", lineNo, f, of)
		}
		nums[i] = v
	}
	r := chipRow{index: nums[0], second: -1, bus: bus(cells[1])}
	if want == 2 {
		r.second = nums[1]
	}
	return r, nil
}

func bus(cell string) string {
	if cell == busNA {
		return ""
	}
	return cell
}

// build makes the chip of an entry; pos is its place in its card, the
// chip index npu-smi counts where it prints none.
func (t *table) build(e entry, pos, lineNo int) (tableChip, bool, error) {
	switch {
	case e.npu == nil && e.chip == nil:
		return tableChip{}, false, nil
	case e.chip == nil && !t.layout.npuRowOnly:
		return tableChip{}, false, fmt.Errorf("line %d: NPU %d has no chip row (the %s layout always prints one)", lineNo, e.npu.NPU, t.layout.name)
	}
	tc := tableChip{card: t.cards}
	if e.npu != nil {
		tc.c = *e.npu
	} else {
		tc.orphan = true
		tc.c = Chip{NPU: -1, Health: HealthUnknown, RawHealth: NoHealthRow}
	}
	tc.c.Chip, tc.c.Device, tc.c.PhyID = pos, -1, -1
	if r := e.chip; r != nil {
		if r.index >= 0 {
			tc.c.Chip = r.index
		}
		switch t.layout.second {
		case colDevice:
			tc.c.Device = r.second
		case colPhyID:
			tc.c.PhyID = r.second
		}
		tc.c.BusID = r.bus
	}
	return tc, true, nil
}
