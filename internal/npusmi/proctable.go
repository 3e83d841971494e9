package npusmi

import (
	"strconv"
	"strings"
)

// The process table follows the chip table (print_proc_total_info,
// print_proc_total_info_with_HBM): one section per card, in the chip
// table's card order, ending in a +===+ border, holding the card's process
// rows ("| <NPU> <chip> | <pid> | ..." or, NPU_SMI_V2, "| <NPU ID> | <pid>
// | ...") or "No running processes found in NPU <id>". It is read only to
// name the card of a chip printed without its NPU row; anything it does
// not expect makes it name none, never an error.

// isProcessHeader finds the header "| NPU ... | Process id | ...".
func isProcessHeader(cells []string) bool {
	for _, c := range cells {
		if strings.HasPrefix(c, "Process id") {
			return true
		}
	}
	return false
}

const noProcesses = "No running processes found in NPU"

// procCards returns the NPU ID of each section of the process table that
// starts at line index from, or nil when it cannot tell them.
func procCards(lines []string, from int) []int {
	var ids []int
	cur := -1 // the current section's NPU ID, -1 before its first row
	headerBorder := false
	for n := from; n < len(lines); n++ {
		line := strings.TrimSpace(lines[n])
		kind, cells := classify(line)
		switch kind {
		case lineOther:
			if line == "" {
				continue
			}
			// The [WARNING] line print_total_info_with_HBM prints after
			// the tables ends them.
			return complete(ids, cur)
		case lineBorder:
			if !isCardEnd(line) {
				return nil
			}
			if !headerBorder {
				headerBorder = true
				continue
			}
			if cur < 0 {
				return nil
			}
			ids, cur = append(ids, cur), -1
		case lineRow:
			id, ok := procRowNPU(cells)
			if !ok || !headerBorder || (cur >= 0 && id != cur) {
				return nil
			}
			cur = id
		}
	}
	return complete(ids, cur)
}

// complete refuses a table whose last section has rows but no border.
func complete(ids []int, cur int) []int {
	if cur >= 0 {
		return nil
	}
	return ids
}

func procRowNPU(cells []string) (int, bool) {
	if len(cells) == 0 {
		return 0, false
	}
	s := cells[0]
	if rest, ok := strings.CutPrefix(s, noProcesses); ok {
		s = rest
	}
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, false
	}
	id, err := strconv.Atoi(f[0])
	return id, err == nil && id >= 0
}

// nameOrphans gives each chip printed without its NPU row the ID of its
// card: the one the card's other chips print, else the one of the process
// table's section for that card. The process table is trusted only when it
// has a section for every card of the chip table and agrees with every
// card whose ID the chip table prints: a card npu-smi stopped printing
// halfway (its +===+ border missing) shifts the sections against the
// cards. Without either the ID stays -1.
func (t *table) nameOrphans(proc []int) {
	known := map[int]map[int]bool{} // card block -> NPU IDs printed in it
	for _, c := range t.chips {
		if c.orphan {
			continue
		}
		if known[c.card] == nil {
			known[c.card] = map[int]bool{}
		}
		known[c.card][c.c.NPU] = true
	}
	useProc := proc != nil && len(proc) == t.cards
	for card, ids := range known {
		if !useProc {
			break
		}
		useProc = len(ids) == 1 && card < len(proc) && ids[proc[card]]
	}
	for i := range t.chips {
		c := &t.chips[i]
		if !c.orphan {
			continue
		}
		if ids := known[c.card]; len(ids) == 1 {
			for id := range ids {
				c.c.NPU = id
			}
		} else if useProc && c.card < len(proc) {
			c.c.NPU = proc[c.card]
		}
	}
}
