package health

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
)

// loaderError is what the glibc dynamic loader prints when a binary cannot
// load a library it needs (ld.so, "error while loading shared libraries").
const loaderError = "error while loading shared libraries"

// exitNotFound is the shell's and the container runtime's exit code for a
// command that could not be found or run (POSIX "command not found").
const exitNotFound = 127

// smiFix is what an operator checks when npu-smi cannot run; the paths
// are those of docs/host-contract.md.
const smiFix = "check on the host that the driver package installed npu-smi (/usr/local/sbin/npu-smi or <driver root>/tools/npu-smi) " +
	"and its libraries (the driver's lib64 directories, /usr/local/dcmi, registered with ldconfig), and that the driver pod's watch " +
	"container mounts the host's / at --host-root; see docs/troubleshooting.md"

// hostProblem recognises npu-smi failing to run at all, as opposed to npu-smi
// running and reporting on the chips. The host (host.Linux) reports these
// as a *host.ProblemError itself; an exit code 127, a loader error in the
// output, or a missing binary are recognised here too, so a host that only
// reports the exit never turns a broken installation into a wedge.
func hostProblem(runErr error) *host.ProblemError {
	if pe, ok := host.IsProblem(runErr); ok {
		return pe
	}
	if ee, ok := host.IsExitError(runErr); ok {
		out := string(ee.Output)
		if i := strings.Index(out, loaderError); i >= 0 {
			return &host.ProblemError{What: "npu-smi cannot load its libraries: " + lineAround(out, i), Fix: smiFix, Err: runErr}
		}
		if ee.Code == exitNotFound {
			return &host.ProblemError{What: fmt.Sprintf("%s could not be run (exit code %d: not found or not executable): %s", ee.Command, ee.Code, firstLine(ee.Output)), Fix: smiFix, Err: runErr}
		}
		return nil
	}
	if errors.Is(runErr, fs.ErrNotExist) || errors.Is(runErr, exec.ErrNotFound) || errors.Is(runErr, fs.ErrPermission) {
		return &host.ProblemError{What: "npu-smi could not be started", Fix: smiFix, Err: runErr}
	}
	return nil
}

// lineAround is the line of s holding index i.
func lineAround(s string, i int) string {
	start := strings.LastIndexByte(s[:i], '\n') + 1
	end := strings.IndexByte(s[i:], '\n')
	if end < 0 {
		return strings.TrimSpace(s[start:])
	}
	return strings.TrimSpace(s[start : i+end])
}

// decideProblem is Decide for a probe that met a host problem (a already
// sets driver-ready=false). The chips
// were not seen, so nothing is said about them: no failure is counted, no
// wedge is declared or undone, no reboot asked for or withdrawn (a reboot
// cannot install a binary or fix a loader path). driver-ready goes false,
// because it is the watch vouching for the chips and it cannot; the
// marker, the driver entry's statement that the driver is loaded, stays
// as it is. The problem is reported once while it lasts, and only while
// the driver is up (marker or wedge record): before that the driver entry
// is still at work, or failed and says so itself (DriverInstallFailed).
func decideProblem(st State, obs Observation, a Actions) (State, Actions) {
	p := obs.Probe.Problem
	if !obs.Marker && !obs.WedgeRecorded {
		return st, a
	}
	if st.Problem == p.What {
		return st, a
	}
	st.Problem = p.What
	a.Events = append(a.Events, Event{Reason: contract.EventNPUHostProblem, Warning: true, Message: fmt.Sprintf(
		"host problem on node %s, not a chip fault: %s; fix: %s. No wedge is declared and no reboot requested (a reboot cannot fix it); driver-ready=false until npu-smi answers again",
		obs.Node.Name, problemText(p), p.Fix)})
	return st, a
}

// problemText is What with its cause, without the Fix that the message
// names on its own.
func problemText(p *host.ProblemError) string {
	if p.Err == nil {
		return p.What
	}
	if _, isExit := host.IsExitError(p.Err); isExit {
		return p.What // the exit is already in What
	}
	return p.What + ": " + p.Err.Error()
}
