// Package procstat reads the CPU time and memory of a process from
// /proc (for a running process) or from its rusage (once it has exited).
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is one reading.
type Usage struct {
	// CPU is user plus system time.
	CPU time.Duration
	// PeakRSS is the high-water mark of the resident set (VmHWM).
	PeakRSS int64
	// RSS is the resident set now (0 for an exited process); AnonRSS is
	// its anonymous part (heap, stacks), the rest being pages of the
	// executable and other files, which the kernel can drop and share.
	RSS, AnonRSS int64
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times. It is 100 on
// every Linux architecture Go supports, and Go offers no sysconf.
const clockTicks = 100

// Read samples a running process.
func Read(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("read stat of process %d: %w", pid, err)
	}
	cpu, err := ParseStat(stat)
	if err != nil {
		return Usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("read status of process %d: %w", pid, err)
	}
	hwm, rss, anon, err := ParseStatus(status)
	if err != nil {
		return Usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return Usage{CPU: cpu, PeakRSS: hwm, RSS: rss, AnonRSS: anon}, nil
}

// ParseStat returns utime+stime from the contents of /proc/<pid>/stat.
func ParseStat(b []byte) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after the last ')' are fixed.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state(3) ppid(4) ... utime(14) stime(15); f[0] is field 3.
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat: %d fields after the command", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat times %q %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// ParseStatus returns VmHWM, VmRSS and RssAnon in bytes from
// /proc/<pid>/status.
func ParseStatus(b []byte) (hwm, rss, anon int64, err error) {
	want := map[string]*int64{"VmHWM": &hwm, "VmRSS": &rss, "RssAnon": &anon}
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		dst := want[key]
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, 0, fmt.Errorf("malformed %s line %q", key, sc.Text())
		}
		kb, perr := strconv.ParseInt(f[0], 10, 64)
		if perr != nil {
			return 0, 0, 0, fmt.Errorf("malformed %s line %q: %w", key, sc.Text(), perr)
		}
		*dst = kb * 1024
		found++
	}
	if found != len(want) {
		return 0, 0, 0, fmt.Errorf("VmHWM, VmRSS or RssAnon missing from /proc status")
	}
	return hwm, rss, anon, nil
}

// MiB formats bytes as mebibytes.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// MachineBusy is the CPU time every process of the machine has used since
// boot (/proc/stat: user, nice, system, irq, softirq, steal; not idle or
// iowait), to tell the measured cluster's load from the rest of a shared
// machine's.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	return ParseMachineStat(b)
}

// ParseMachineStat returns the busy time of the "cpu" line of /proc/stat.
func ParseMachineStat(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("malformed /proc/stat: first line %q", line)
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat field %d: %w", i, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
