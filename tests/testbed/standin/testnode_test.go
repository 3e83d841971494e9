package standin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// nodeEnv makes the test binary a testNode's helper instead of running
// the tests; its value is the node's directory.
const nodeEnv = "NPU_STACK_STANDIN_TEST_NODE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(nodeEnv); dir != "" {
		if err := nodeMain(dir); err != nil {
			fmt.Fprintln(os.Stderr, "test node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testNode is a small host for the stand-ins that the installer tests run
// chrooted into, as the driver pod runs the package chrooted into a
// node's host: the machine's /usr and /etc as overlays whose writes stay
// in the node, its own /dev (tmpfs), /sys/module, /var and /tmp. A helper
// process (this test binary, nodeMain) builds it in a mount namespace of
// its own, so nothing leaks onto the machine and everything goes when the
// helper dies, and in a PID namespace of its own whose /proc it mounts:
// the installer's scan of /proc/*/fd then sees the node's processes only,
// not those of other tests or test-bed nodes on the machine (a device
// plugin there holds a "/dev/davinci0" too). The helper runs the node's
// processes as its children and holds device nodes itself on request, so
// a holder of the test is visible in the node's /proc.
type testNode struct {
	t    *testing.T
	cmd  *exec.Cmd
	root string // the node's / in the helper's mount namespace

	mu  sync.Mutex
	in  io.Writer
	out *bufio.Reader
}

type nodeRequest struct {
	Op    string   `json:"op"` // hold, unhold, start, wait, kill
	Path  string   `json:"path,omitempty"`
	Argv  []string `json:"argv,omitempty"`
	Env   []string `json:"env,omitempty"`
	Until string   `json:"until,omitempty"` // start: return once the output has a line containing it
	PID   int      `json:"pid,omitempty"`
}

type nodeResponse struct {
	Err  string `json:"err,omitempty"`
	PID  int    `json:"pid,omitempty"`
	Code int    `json:"code,omitempty"`
	Out  string `json:"out,omitempty"`
}

// nodePATH is ubuntu's PATH, as the driver pod's.
const nodePATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(self)
	cmd.Env = []string{nodeEnv + "=" + dir}
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the test node's helper: %v", err)
	}
	n := &testNode{t: t, cmd: cmd, root: filepath.Join(dir, "root"), in: in, out: bufio.NewReader(out)}
	// Killing the helper, PID 1 of the node, kills every process there.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("test node helper's stderr:\n%s", stderr.String())
		}
	})
	if line, err := n.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("test node: %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	return n
}

// at is where the test reaches the node's path p: through the helper's
// root, which shows its mounts.
func (n *testNode) at(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.cmd.Process.Pid), n.root, p)
}

func (n *testNode) do(req nodeRequest) (nodeResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var resp nodeResponse
	b, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	if _, err := n.in.Write(append(b, '\n')); err != nil {
		return resp, fmt.Errorf("test node: %s: %w", req.Op, err)
	}
	line, err := n.out.ReadBytes('\n')
	if err != nil {
		return resp, fmt.Errorf("test node: %s: %w", req.Op, err)
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return resp, fmt.Errorf("test node: %s: %w", req.Op, err)
	}
	if resp.Err != "" {
		return resp, fmt.Errorf("test node: %s: %s", req.Op, resp.Err)
	}
	return resp, nil
}

func (n *testNode) must(req nodeRequest) nodeResponse {
	n.t.Helper()
	resp, err := n.do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	return resp
}

// hold makes the helper, a process of the node, open p read-write.
func (n *testNode) hold(p string) { n.t.Helper(); n.must(nodeRequest{Op: "hold", Path: p}) }

// unhold closes what hold opened.
func (n *testNode) unhold() { n.t.Helper(); n.must(nodeRequest{Op: "unhold"}) }

// start runs argv chrooted into the node and returns its PID in the node.
func (n *testNode) start(until string, argv ...string) int {
	n.t.Helper()
	return n.must(nodeRequest{Op: "start", Argv: argv, Until: until}).PID
}

// wait waits for a started process: its exit code (-1 when killed by a
// signal) and its output.
func (n *testNode) wait(pid int) (int, string) {
	n.t.Helper()
	r := n.must(nodeRequest{Op: "wait", PID: pid})
	return r.Code, r.Out
}

func (n *testNode) run(argv ...string) (int, string) {
	n.t.Helper()
	return n.wait(n.start("", argv...))
}

func (n *testNode) kill(pid int) { n.t.Helper(); n.must(nodeRequest{Op: "kill", PID: pid}) }

// nodeMain is the helper: PID 1 of the node's PID namespace, in a mount
// namespace of its own.
func nodeMain(dir string) error {
	root := filepath.Join(dir, "root")
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	for _, d := range []string{"usr", "etc", "proc", "dev", "sys/module", "var", "run", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	mount := func(src, target, fstype, data string, flags uintptr) error {
		if err := unix.Mount(src, filepath.Join(root, target), fstype, flags, data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", src, target, err)
		}
		return nil
	}
	for _, d := range []string{"usr", "etc"} {
		upper, work := filepath.Join(dir, "upper", d), filepath.Join(dir, "work", d)
		for _, p := range []string{upper, work} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		}
		if err := mount("overlay", d, "overlay", fmt.Sprintf("lowerdir=/%s,upperdir=%s,workdir=%s", d, upper, work), 0); err != nil {
			return err
		}
	}
	// bin, sbin, lib, lib64: symlinks into /usr as on the machine, or
	// read-only binds on a machine without merged /usr.
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		st, err := os.Lstat("/" + top)
		switch {
		case err != nil:
			continue
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + top)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, top)); err != nil {
				return err
			}
		default:
			if err := os.Mkdir(filepath.Join(root, top), 0o755); err != nil {
				return err
			}
			if err := mount("/"+top, top, "", "", unix.MS_BIND|unix.MS_REC); err != nil {
				return err
			}
			if err := mount("", top, "", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY); err != nil {
				return err
			}
		}
	}
	if err := mount("proc", "proc", "proc", "", 0); err != nil {
		return err
	}
	if err := mount("tmpfs", "dev", "tmpfs", "mode=755", 0); err != nil {
		return err
	}
	for _, d := range []string{"null", "zero", "random", "urandom"} {
		if err := os.WriteFile(filepath.Join(root, "dev", d), nil, 0o666); err != nil {
			return err
		}
		if err := mount("/dev/"+d, "dev/"+d, "", "", unix.MS_BIND); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	return serveNode(root, os.Stdin, os.Stdout)
}

// nodeProc is a process the helper started.
type nodeProc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer // guarded by done: complete once done is closed
	done chan struct{}
}

func serveNode(root string, in io.Reader, out io.Writer) error {
	var held []*os.File
	procs := map[int]*nodeProc{}
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var req nodeRequest
		var resp nodeResponse
		err := json.Unmarshal(sc.Bytes(), &req)
		switch {
		case err != nil:
		case req.Op == "hold":
			var f *os.File
			if f, err = os.OpenFile(filepath.Join(root, req.Path), os.O_RDWR, 0); err == nil {
				held = append(held, f)
			}
		case req.Op == "unhold":
			for _, f := range held {
				_ = f.Close()
			}
			held = nil
		case req.Op == "start":
			var p *nodeProc
			if p, err = startNodeProc(root, req); err == nil {
				procs[p.cmd.Process.Pid] = p
				resp.PID = p.cmd.Process.Pid
			}
		case req.Op == "wait":
			p := procs[req.PID]
			if p == nil {
				err = fmt.Errorf("no process %d started", req.PID)
				break
			}
			<-p.done
			delete(procs, req.PID)
			resp.Code, resp.Out = p.cmd.ProcessState.ExitCode(), p.out.String()
		case req.Op == "kill":
			err = unix.Kill(req.PID, unix.SIGKILL)
		default:
			err = fmt.Errorf("unknown op %q", req.Op)
		}
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
	}
	return sc.Err()
}

// startNodeProc starts req.Argv chrooted into root with its output on a
// pipe the helper reads; with req.Until it returns once a line of the
// output contains it (or fails when the output ends first).
func startNodeProc(root string, req nodeRequest) (*nodeProc, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("no command")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &nodeProc{cmd: exec.Command(req.Argv[0], req.Argv[1:]...), done: make(chan struct{})}
	p.cmd.Env = append([]string{nodePATH, "HOME=/root"}, req.Env...)
	p.cmd.Dir = "/"
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	err = p.cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start %s: %w", req.Argv[0], err)
	}
	seen := make(chan bool, 1)
	go func() {
		defer close(p.done)
		br := bufio.NewReader(r)
		found := req.Until == ""
		for {
			line, err := br.ReadString('\n')
			p.out.WriteString(line)
			if !found && strings.Contains(line, req.Until) {
				found = true
				seen <- true
			}
			if err != nil {
				break
			}
		}
		if !found {
			seen <- false
		}
		_ = r.Close()
		_ = p.cmd.Wait()
	}()
	if req.Until != "" && !<-seen {
		<-p.done
		return nil, fmt.Errorf("%s ended without printing %q:\n%s", req.Argv[0], req.Until, p.out.String())
	}
	return p, nil
}
