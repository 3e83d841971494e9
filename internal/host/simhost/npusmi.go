package simhost

import (
	"context"
	"fmt"
	"strings"

	"github.com/openfuyao/npu-stack/internal/host"
)

// RunSMI renders what `npu-smi <args>` prints on a machine in state st, in
// the layout of the vendor tool (only `info` is modelled).
func RunSMI(ctx context.Context, st State, args ...string) ([]byte, error) {
	cmd := "npu-smi " + strings.Join(args, " ")
	switch st.SMIMode {
	case SMIHang, SMIStuck:
		// Without the host to watch, a stuck npu-smi (Host.NPUSMI) can
		// only be modelled as a hang.
		<-ctx.Done()
		return nil, fmt.Errorf("%s: %w", cmd, ctx.Err())
	case SMIFail:
		out := []byte("dcmi module initialize failed. ret is -8005\n")
		return out, &host.ExitError{Command: cmd, Code: 255, Output: out}
	case SMIRaw:
		if st.SMIExitCode != 0 {
			return []byte(st.SMIOutput), &host.ExitError{Command: cmd, Code: st.SMIExitCode, Output: []byte(st.SMIOutput)}
		}
		return []byte(st.SMIOutput), nil
	}
	if len(args) != 1 || args[0] != "info" {
		out := []byte(fmt.Sprintf("Error: unsupported command %q in the simulated npu-smi\n", strings.Join(args, " ")))
		return out, &host.ExitError{Command: cmd, Code: 1, Output: out}
	}
	if st.LoadedDriver == "" {
		out := []byte("dcmi module initialize failed. ret is -8005\n")
		return out, &host.ExitError{Command: cmd, Code: 255, Output: out}
	}
	return []byte(infoTable(st)), nil
}

func infoTable(st State) string {
	if strings.HasPrefix(strings.ToLower(st.Chip), "310") {
		return infoTable310P(st)
	}
	name := strings.ToUpper(st.Chip) + "3"
	var b strings.Builder
	line := "+---------------------------+---------------+----------------------------------------------------+\n"
	fmt.Fprintf(&b, "+------------------------------------------------------------------------------------------------+\n")
	fmt.Fprintf(&b, "| npu-smi %-24s Version: %-54s|\n", st.LoadedDriver, st.LoadedDriver)
	b.WriteString(line)
	b.WriteString("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n")
	b.WriteString("| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n")
	sep := "+===========================+===============+====================================================+\n"
	b.WriteString(sep)
	for i := 0; i < st.ChipCount; i++ {
		health := "OK"
		if contains(st.Wedged, i) {
			health = "Critical"
		}
		fmt.Fprintf(&b, "| %-5d %-19s | %-13s | %-11s %-17s %-21s|\n", i, name, health, "93.2", "38", "0    / 0")
		fmt.Fprintf(&b, "| %-25d | %-13s | %-11s %-17s %-21s|\n", 0, fmt.Sprintf("0000:%02X:00.0", 0xC1+i), "0", "0    / 0", "3162 / 65536")
		b.WriteString(sep)
	}
	return b.String()
}

// infoTable310P is the 310P layout: a Device column (the logical ID) in
// every chip row, one chip per card as on an Atlas 300I Pro.
func infoTable310P(st State) string {
	name := strings.ToUpper(st.Chip) + "3"
	var b strings.Builder
	border := "+-------------------------------+-----------------+------------------------------------------------------+\n"
	sep := "+===============================+=================+======================================================+\n"
	b.WriteString("+--------------------------------------------------------------------------------------------------------+\n")
	fmt.Fprintf(&b, "| npu-smi %-40s Version: %-46s|\n", st.LoadedDriver, st.LoadedDriver)
	b.WriteString(border)
	b.WriteString("| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |\n")
	b.WriteString("| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |\n")
	b.WriteString(sep)
	for i := 0; i < st.ChipCount; i++ {
		health := "OK"
		if contains(st.Wedged, i) {
			health = "Critical"
		}
		fmt.Fprintf(&b, "| %-7d %-21s | %-15s | %-12s %-17s %-22s|\n", i, name, health, "NA", "46", "0     / 0")
		fmt.Fprintf(&b, "| %-7d %-21d | %-15s | %-12s %-39s|\n", 0, i, fmt.Sprintf("0000:%02X:00.0", 0x3B+i), "0", "1412 / 21527")
		b.WriteString(sep)
	}
	return b.String()
}
