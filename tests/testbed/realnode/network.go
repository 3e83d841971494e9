package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// nodeNet is a node's link to the host: a veth pair whose host end is
// vethName (10.250.x.y/30 on both sides), so the API server reaches the
// kubelet at nodeIP.
type nodeNet struct {
	vethName string
	hostIP   string
	nodeIP   string
}

// Each node takes one /30 of 10.250.0.0/16; the slot is picked at random
// and the veth's name carries it, so a slot in use (another node, on this
// or another test binary) makes the veth's creation fail and another slot
// is tried.
const (
	netSlots     = 1 << 14
	netSlotTries = 20
)

func slotNet(slot int) nodeNet {
	base := 4 * slot
	a, b := base>>8, base&0xff
	return nodeNet{
		vethName: "rnode" + strconv.Itoa(slot),
		hostIP:   fmt.Sprintf("10.250.%d.%d", a, b+1),
		nodeIP:   fmt.Sprintf("10.250.%d.%d", a, b+2),
	}
}

// setupNetwork creates the veth pair, its node end as eth0 in the node's
// network namespace (that of pid), and configures both ends. The node
// also gets serviceIP on its loopback: the API server's forwarder listens
// there, so pods reach "kubernetes.default" as on a cluster with a
// service proxy. A node booting again passes its previous link (prev)
// and keeps its addresses, as a machine keeps its IP across reboots.
func setupNetwork(ctx context.Context, pid int, serviceIP string, prev nodeNet) (nodeNet, error) {
	var nn nodeNet
	var lastErr error
	for range netSlotTries {
		nn = slotNet(rand.IntN(netSlots))
		if prev.vethName != "" {
			nn = prev
		}
		out, err := exec.CommandContext(ctx, "ip", "link", "add", nn.vethName, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pid)).CombinedOutput()
		if err == nil {
			lastErr = nil
			break
		}
		lastErr = fmt.Errorf("ip link add %s: %w: %s", nn.vethName, err, strings.TrimSpace(string(out)))
		if !strings.Contains(string(out), "exists") || prev.vethName != "" {
			return nn, lastErr
		}
	}
	if lastErr != nil {
		return nn, lastErr
	}
	host := [][]string{
		{"addr", "add", nn.hostIP + "/30", "dev", nn.vethName},
		{"link", "set", nn.vethName, "up"},
	}
	for _, args := range host {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return nn, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	node := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", serviceIP + "/32", "dev", "lo"},
		{"addr", "add", nn.nodeIP + "/30", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", nn.hostIP},
	}
	for _, args := range node {
		cmd := append([]string{"--target", strconv.Itoa(pid), "--net", "ip"}, args...)
		if out, err := exec.CommandContext(ctx, "nsenter", cmd...).CombinedOutput(); err != nil {
			return nn, fmt.Errorf("in the node: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nn, nil
}

// deleteVeth removes the host end (and with it the node end). A node's
// veth also goes when its network namespace does, but the kernel frees a
// namespace asynchronously: deleting it makes the teardown complete on
// return.
func (nn nodeNet) deleteVeth() error {
	if nn.vethName == "" {
		return nil
	}
	out, err := exec.Command("ip", "link", "del", nn.vethName).CombinedOutput()
	if err != nil && linkExists(nn.vethName) {
		return fmt.Errorf("ip link del %s: %w: %s", nn.vethName, err, strings.TrimSpace(string(out)))
	}
	// Gone already: the kernel removes a veth pair with the namespace
	// of either end, so a node whose namespace went first has none left
	// ("Cannot find device", or "RTNETLINK answers: No such device" when
	// it went between the lookup and the delete).
	return nil
}

// linkExists says whether the host has a network interface name; on a
// failure to tell, it assumes so, so that an error is not hidden.
func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return !errors.Is(err, fs.ErrNotExist)
}

// forwarder accepts TCP connections on a socket of the node's network
// namespace and relays them to an address of the host's: the control
// plane and the registry listen on the host's loopback only, and the node
// reaches them at the same addresses (or the service IP) on its own.
type forwarder struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  chan struct{}
}

// listenIn opens a TCP listener on addr inside the network namespace at
// nsPath. The socket belongs to the namespace it is created in, so the
// calling thread switches there and back; if it cannot switch back, the
// thread stays locked and Go discards it when the goroutine ends.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer func() { _ = own.Close() }()
		target, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer func() { _ = target.Close() }()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		ln, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				_ = ln.Close()
			}
			ch <- result{err: fmt.Errorf("return from %s: %w", nsPath, err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ln: ln, err: lerr}
	}()
	r := <-ch
	return r.ln, r.err
}

func startForwarder(nsPath, listen, to string) (*forwarder, error) {
	ln, err := listenIn(nsPath, listen)
	if err != nil {
		return nil, fmt.Errorf("forward %s in the node to %s: %w", listen, to, err)
	}
	f := &forwarder{ln: ln, to: to, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	defer close(f.done)
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.relay(c)
	}
}

func (f *forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false
	}
	if add {
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *forwarder) relay(in net.Conn) {
	defer func() { _ = in.Close() }()
	if !f.track(in, true) {
		return
	}
	defer f.track(in, false)
	out, err := net.Dial("tcp", f.to)
	if err != nil {
		return
	}
	defer func() { _ = out.Close() }()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	// One direction ended: end both (a watch never half-closes).
	<-done
	_ = in.Close()
	_ = out.Close()
	<-done
}

// close stops accepting and closes every relayed connection: their
// sockets hold the node's network namespace alive.
func (f *forwarder) close() error {
	err := f.ln.Close()
	<-f.done
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
