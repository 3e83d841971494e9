package npusmi

import (
	"fmt"
	"strings"
)

// layout is one of the chip tables npu-smi prints, told apart by its
// two header lines (npu_info.c query_total_info picks the printer by chip
// type; docs/host-contract.md section 3 has the table).
type layout struct {
	name string
	// second is the chip-row column after the chip index: colDevice,
	// colPhyID, or "" when the chip row holds the index alone.
	second string
	// v950 is print_total_info_header_950: NPU ID and Name in cells of
	// their own, and a chip row whose first two cells are empty
	// (print_chip_info prints no numbers for 950).
	v950 bool
	// npuRowOnly says a chip may have an NPU row without a chip row:
	// print_card_total_info_second returns without printing when the
	// chip's logical ID cannot be read. The HBM layouts always print it.
	npuRowOnly bool
}

// Columns that may follow Chip in the header's second line.
const (
	colDevice = "Device"
	colPhyID  = "Phy-ID"
)

var (
	// print_total_info_header_v1, "| Chip                      | Bus-Id".
	layout910 = layout{name: "910/910B"}
	// The same header for 910_93, "| Chip  Phy-ID              | Bus-Id".
	layoutA3 = layout{name: "Atlas A3 (910_93)", second: colPhyID}
	// print_total_info, "| Chip    Device                | Bus-Id".
	layout310 = layout{name: "310/310P/310B", second: colDevice, npuRowOnly: true}
	// print_total_info_header_950, "|        |                  | Bus-Id".
	layout950 = layout{name: "950", v950: true}
)

// findHeader finds the table's header and returns its layout, the line
// after the border under it and the driver version printed above it.
func findHeader(lines []string) (layout, int, string, error) {
	ver := ""
	for i, raw := range lines {
		kind, cells := classify(strings.TrimSpace(raw))
		if kind != lineRow {
			continue
		}
		if ver == "" {
			ver = version(cells)
		}
		var l layout
		var err error
		switch {
		case isHeaderV1(cells):
			l, err = secondHeaderV1(lines, i+1)
		case isHeader950(cells):
			l, err = secondHeader950(lines, i+1)
		default:
			continue
		}
		if err != nil {
			return layout{}, 0, "", err
		}
		// The header ends with a +===+ border; the chip table follows.
		n := i + 2
		if n >= len(lines) || !isCardEnd(strings.TrimSpace(lines[n])) {
			return layout{}, 0, "", fmt.Errorf("line %d: want the +===+ border under the %s header, got %s", n+1, l.name, excerptLine(lines, n))
		}
		return l, n + 1, ver, nil
	}
	return layout{}, 0, "", ErrNoTable
}

// isHeaderV1 reads "| NPU   Name | Health | ...", the first header line of
// print_total_info_header_v1 and print_total_info.
func isHeaderV1(cells []string) bool {
	if len(cells) < 2 {
		return false
	}
	f := strings.Fields(cells[0])
	return len(f) == 2 && f[0] == "NPU" && f[1] == "Name" && cells[1] == "Health"
}

// isHeader950 reads "| NPU ID | Name | Health | ...".
func isHeader950(cells []string) bool {
	return len(cells) >= 3 && cells[0] == "NPU ID" && cells[1] == "Name" && cells[2] == "Health"
}

func secondHeaderV1(lines []string, n int) (layout, error) {
	cells := headerCells(lines, n)
	fields := []string{}
	if len(cells) > 0 {
		fields = strings.Fields(cells[0])
	}
	if len(cells) < 2 || len(fields) == 0 || fields[0] != "Chip" || cells[1] != "Bus-Id" {
		return layout{}, fmt.Errorf("header line %d: want \"| Chip ... | Bus-Id | ...\" under \"| NPU Name | Health |\", got %s", n+1, excerptLine(lines, n))
	}
	switch strings.Join(fields[1:], " ") {
	case "":
		return layout910, nil
	case colPhyID:
		return layoutA3, nil
	case colDevice:
		return layout310, nil
	}
	return layout{}, fmt.Errorf("header line %d: unknown chip columns %q; known: \"Chip\", \"Chip %s\" and \"Chip %s\"", n+1, cells[0], colDevice, colPhyID)
}

func secondHeader950(lines []string, n int) (layout, error) {
	cells := headerCells(lines, n)
	if len(cells) < 3 || cells[0] != "" || cells[1] != "" || cells[2] != "Bus-Id" {
		return layout{}, fmt.Errorf("header line %d: want \"|        |                  | Bus-Id | ...\" under \"| NPU ID | Name | Health |\", got %s", n+1, excerptLine(lines, n))
	}
	return layout950, nil
}

func headerCells(lines []string, n int) []string {
	if n >= len(lines) {
		return nil
	}
	_, cells := classify(strings.TrimSpace(lines[n]))
	return cells
}

// isCardEnd tells the +===+ border that ends a card (and the header) from
// the +---+ line that separates the chips of one card.
func isCardEnd(line string) bool {
	return strings.HasPrefix(line, "+") && strings.Contains(line, "=")
}

func excerptLine(lines []string, n int) string {
	if n >= len(lines) {
		return "the end of the output"
	}
	return excerpt(lines[n])
}
