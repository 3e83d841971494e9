package simhost

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
		return out, &host.ExitError{Command: cmd, Code: dcmiInternalExit, Output: out}
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
		return out, &host.ExitError{Command: cmd, Code: dcmiInternalExit, Output: out}
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

// run is the simulated machine's program runner for host.Linux: it checks
// what execve and the dynamic loader would (the program is an executable
// file under the root; every library npu-smi links is in a directory of
// its LD_LIBRARY_PATH or the installer's loader configuration) and then
// prints what npu-smi prints in the machine's state.
func (h *Host) run(ctx context.Context, e host.Exec) ([]byte, error) {
	cmd := strings.TrimSpace(e.Path + " " + strings.Join(e.Args, " "))
	fi, err := os.Stat(filepath.Join(e.Root, e.Path))
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("start %s: %w", cmd, fs.ErrPermission)
	}
	if missing := missingLib(e); missing != "" {
		msg := []byte(fmt.Sprintf("%s: %s: %s: cannot open shared object file: No such file or directory\n", e.Path, host.LoaderError, missing))
		return nil, &host.ExitError{Command: cmd, Code: 127, Stderr: msg}
	}
	st, err := h.State()
	if err != nil {
		return nil, err
	}
	return RunSMI(ctx, st, e.Args...)
}

// missingLib is the first library of npu-smi the loader would not find,
// "" if all are there.
func missingLib(e host.Exec) string {
	var dirs []string
	for _, kv := range e.Env {
		if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
			dirs = append(dirs, strings.Split(v, ":")...)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.Root, "/etc/ld.so.conf.d/ascend_driver_so.conf")); err == nil {
		dirs = append(dirs, strings.Fields(string(b))...)
	}
	libs := make([]string, 0, len(driverLibs))
	for lib := range driverLibs {
		libs = append(libs, lib)
	}
	sort.Strings(libs)
	for _, lib := range libs {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(e.Root, d, lib)); err == nil {
				found = true
				break
			}
		}
		if !found {
			return lib
		}
	}
	return ""
}

// dcmiInternalExit is npu-smi's exit status when dcmi_init fails with
// -8005 (internal error): main() ends with exit(npu_main(...)), so the
// status is the code's low byte (hicann/driver main,
// src/custom/dev_prod/user/npucli/src/npu_smi.c; -8005 & 0xff = 187).
const dcmiInternalExit = 187

// Wedge makes chips report Critical until the next reboot.
func (h *Host) Wedge(chips ...int) error {
	return h.Update(func(st *State) error {
		for _, c := range chips {
			if c < 0 || c >= st.ChipCount {
				return fmt.Errorf("simulated host %s: no chip %d (has %d)", h.Dir, c, st.ChipCount)
			}
			if !contains(st.Wedged, c) {
				st.Wedged = append(st.Wedged, c)
			}
		}
		sort.Ints(st.Wedged)
		return nil
	})
}

// SetSMI changes how npu-smi behaves (raw output and exit code for SMIRaw).
func (h *Host) SetSMI(mode SMIMode, output string, exitCode int) error {
	return h.Update(func(st *State) error {
		st.SMIMode, st.SMIOutput, st.SMIExitCode = mode, output, exitCode
		return nil
	})
}

func (h *Host) NPUSMI(ctx context.Context, args ...string) ([]byte, error) {
	st, err := h.State()
	if err != nil {
		return nil, err
	}
	if st.SMIMode == SMIStuck {
		return nil, h.stuck(args)
	}
	return h.linux.NPUSMI(ctx, args...)
}

// stuck blocks, deaf to any context, until the mode is no longer SMIStuck.
func (h *Host) stuck(args []string) error {
	tick := time.NewTicker(stuckPoll)
	defer tick.Stop()
	for range tick.C {
		st, err := h.State()
		if err != nil {
			return err
		}
		if st.SMIMode != SMIStuck {
			break
		}
	}
	return fmt.Errorf("npu-smi %s: was stuck in uninterruptible sleep until the device came back", strings.Join(args, " "))
}
