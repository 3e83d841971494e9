package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// davinciNode matches the device nodes the vendor installer refuses to
// install under while a process holds one: /dev/davinci_manager,
// /dev/devmm_svm, /dev/hisi_hdc and /dev/davinci<N> (hicann/driver v8.5.0,
// scripts/package/custom/driver/common/scripts/common.sh checkUserProcess,
// which finds them with fuser or `ls -l /proc/*/fd` matched by path). The
// path may carry a prefix: a link in /proc/<pid>/fd shows the path in the
// holder's mount namespace, /host/dev/davinci0 for a process chrooted into
// a host root mounted at /host. By path, not device numbers: a test bed's
// nodes share /dev/null's numbers, and the installer matches paths too.
var davinciNode = regexp.MustCompile(`(^|/)dev/(davinci[0-9]+|davinci_manager|devmm_svm|hisi_hdc)( \(deleted\))?$`)

// containerID is a CRI container ID (64 hex digits) in a cgroup path:
// .../pod<uid>/<id> (cgroupfs) or .../cri-containerd-<id>.scope (systemd).
var containerID = regexp.MustCompile(`[0-9a-f]{64}`)

// ContainerLogsDir is where the kubelet links each container's log as
// <pod>_<namespace>_<container>-<container-id>.log (kubernetes v1.37.1,
// pkg/kubelet/kuberuntime/legacy.go legacyLogSymlink, logSymlink;
// kubecontainer.BuildPodFullName is <pod>_<namespace>). It names the pod
// of a container ID on the node itself, without the API server.
const ContainerLogsDir = "/var/log/containers"

// Holder is a process of the host that has a davinci device node open.
type Holder struct {
	PID     int
	Command string
	Devices []string
	// ContainerID is the CRI container the process runs in, "" outside one.
	ContainerID string
	// Namespace, Pod and Container name the Kubernetes container, when
	// the kubelet's log link for ContainerID is found.
	Namespace, Pod, Container string
}

// String names the holder as an operator looks for it: by pod and
// container when it has one, else by PID and command.
func (h Holder) String() string {
	devs := strings.Join(h.Devices, ", ")
	switch {
	case h.Pod != "":
		return fmt.Sprintf("pod %s/%s container %s (PID %d, %s) holds %s", h.Namespace, h.Pod, h.Container, h.PID, h.Command, devs)
	case h.ContainerID != "":
		return fmt.Sprintf("container %s (PID %d, %s) holds %s", h.ContainerID[:12], h.PID, h.Command, devs)
	default:
		return fmt.Sprintf("PID %d (%s) holds %s", h.PID, h.Command, devs)
	}
}

// DeviceHolders lists the host's processes holding a davinci device node
// open, as the vendor installer finds them, reading the host's /proc as
// this process reaches it through path (Host.Path). Processes that exit
// while being read are skipped. A host without a /proc there (a simulated
// one) has no holders.
func DeviceHolders(path func(hostPath string) string) ([]Holder, error) {
	procDir := path("/proc")
	entries, err := os.ReadDir(procDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the host's processes in %s: %w", procDir, err)
	}
	self := os.Getpid()
	var out []Holder
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self && procDir == "/proc" {
			continue
		}
		devs := heldDevices(filepath.Join(procDir, e.Name(), "fd"))
		if len(devs) == 0 {
			continue
		}
		h := Holder{PID: pid, Devices: devs, Command: command0(filepath.Join(procDir, e.Name()))}
		h.ContainerID = cgroupContainer(filepath.Join(procDir, e.Name(), "cgroup"))
		if h.ContainerID != "" {
			h.Namespace, h.Pod, h.Container = podOf(path(ContainerLogsDir), h.ContainerID)
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func heldDevices(fdDir string) []string {
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil // gone, or a kernel thread
	}
	seen := map[string]bool{}
	var devs []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue
		}
		m := davinciNode.FindStringSubmatch(target)
		if m == nil || seen[m[2]] {
			continue
		}
		seen[m[2]] = true
		devs = append(devs, "/dev/"+m[2])
	}
	sort.Strings(devs)
	return devs
}

// command0 is the process's command line, or its comm when it has none.
func command0(procPID string) string {
	if b, err := os.ReadFile(filepath.Join(procPID, "cmdline")); err == nil {
		if s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")); s != "" {
			if len(s) > 120 {
				s = s[:120] + "…"
			}
			return s
		}
	}
	b, _ := os.ReadFile(filepath.Join(procPID, "comm"))
	return strings.TrimSpace(string(b))
}

func cgroupContainer(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	ids := containerID.FindAllString(string(b), -1)
	if len(ids) == 0 {
		return ""
	}
	return ids[len(ids)-1]
}

// podOf reads the kubelet's log link of container id in dir:
// <pod>_<namespace>_<container>-<id>.log. Names are DNS labels or
// subdomains, so they hold no underscore.
func podOf(dir, id string) (namespace, pod, container string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", ""
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), "-"+id+".log")
		if !ok {
			continue
		}
		parts := strings.Split(name, "_")
		if len(parts) == 3 {
			return parts[1], parts[0], parts[2]
		}
	}
	return "", "", ""
}
