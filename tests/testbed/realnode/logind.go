package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// The stand-in logind: org.freedesktop.login1's Manager as far as the
// rebooter and the kubelet's graceful node shutdown use it, behaving as
// systemd v252.39's logind does (docs/host-contract.md, section 8, "Who
// may reboot over D-Bus"; src/login/logind-dbus.c unless said otherwise).
const (
	logindName    = "org.freedesktop.login1"
	logindPath    = dbus.ObjectPath("/org/freedesktop/login1")
	logindManager = "org.freedesktop.login1.Manager"
	// inhibitDir holds the inhibitors' fifos (src/login/logind-inhibit.c
	// inhibitor_create_fifo).
	inhibitDir = "/run/systemd/inhibit"
	// defaultInhibitDelayMax is InhibitDelayMaxSec when logind.conf sets
	// none (src/login/logind-core.c manager_reset_config); the node's
	// /etc has no logind.conf, and its kubelet asks for no more
	// (config.go).
	defaultInhibitDelayMax = 5 * time.Second
	// The errors logind answers with (src/libsystemd/sd-bus/
	// bus-common-errors.h, bus-error.c errno_to_bus_error_const: -EACCES).
	errOperationInProgress = "org.freedesktop.login1.OperationInProgress"
	errAccessDenied        = "org.freedesktop.DBus.Error.AccessDenied"
	errInvalidArgs         = "org.freedesktop.DBus.Error.InvalidArgs"
)

// LogindRecord is what a boot's stand-in logind saw and did, for tests.
type LogindRecord struct {
	// Reboots are the Reboot calls, refused ones included.
	Reboots []LogindReboot
	// Inhibitors are the inhibitor locks taken, in order.
	Inhibitors []Inhibitor
	// PrepareForShutdown are the values of the PrepareForShutdown
	// signals sent, in order; PreparedAt when the first was.
	PrepareForShutdown []bool
	PreparedAt         time.Time
	// RebootTargetAt is when logind asked systemd for reboot.target;
	// DelayTimedOut whether it did because InhibitDelayMaxSec passed with
	// a delay inhibitor still held.
	RebootTargetAt time.Time
	DelayTimedOut  bool
}

// LogindReboot is one Reboot(interactive) call: the caller's uid and the
// D-Bus error it was refused with ("" when accepted).
type LogindReboot struct {
	UID         uint32
	Interactive bool
	Err         string
}

// Inhibitor is one Inhibit(what, who, why, mode) lock: who took it and
// when its holders closed the last copy of its fd (zero while held).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
	Taken, Released      time.Time
}

// standinLogind is one boot's logind: its state outlives a restart of the
// bus (connect again), as logind's does.
type standinLogind struct {
	node     string
	fifoDir  string // the node's inhibitDir, as the host reaches it
	delayMax time.Duration
	mu       sync.Mutex
	conn     *dbus.Conn
	rec      *LogindRecord
	held     map[int]*os.File // open inhibitors: record index -> fifo read end
	counter  int
	delayed  bool // a shutdown is under way (m->delayed_action)
	executed bool // reboot.target asked for
	stopped  bool
	timer    *time.Timer
}

// inhibitWhat are the names inhibit_what_from_string knows
// (src/login/logind-inhibit.c inhibit_what_to_string).
var inhibitWhat = []string{"shutdown", "sleep", "idle", "handle-power-key", "handle-suspend-key", "handle-hibernate-key", "handle-lid-switch", "handle-reboot-key"}

// connect takes org.freedesktop.login1 on the bus at address as root
// (the bus's policy lets only root own it: org.freedesktop.login1.conf).
func (l *standinLogind) connect(address string) (*dbus.Conn, error) {
	obj := &busObject{path: logindPath, methods: map[string]map[string]busMethod{
		logindManager: {
			"Reboot":  {in: []any{false}, call: l.reboot},
			"Inhibit": {in: []any{"", "", "", ""}, call: l.inhibit},
		},
		"org.freedesktop.DBus.Properties": {
			"Get":    {in: []any{"", ""}, call: l.getProperty},
			"GetAll": {in: []any{""}, call: l.getAll},
		},
	}}
	conn, err := dbus.Dial(address, dbus.WithHandler(obj))
	if err != nil {
		return nil, fmt.Errorf("node %s: stand-in logind: connect to the system bus: %w", l.node, err)
	}
	err = conn.Auth(nil)
	if err == nil {
		err = conn.Hello()
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("node %s: stand-in logind: %w", l.node, err)
	}
	l.mu.Lock()
	l.conn = conn
	l.mu.Unlock()
	reply, err := conn.RequestName(logindName, dbus.NameFlagDoNotQueue)
	if err == nil && reply != dbus.RequestNameReplyPrimaryOwner {
		err = fmt.Errorf("reply %v, want primary owner", reply)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("node %s: stand-in logind: RequestName(%s): %w", l.node, logindName, err)
	}
	return conn, nil
}

// callerCreds are the caller's uid and pid, which logind takes from the
// bus (sd_bus_query_sender_creds -> GetConnectionUnixUser, ...ProcessID).
func (l *standinLogind) callerCreds(conn *dbus.Conn, sender string) (uid, pid uint32, err error) {
	bus := conn.BusObject()
	if err := bus.Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, sender).Store(&uid); err != nil {
		return 0, 0, err
	}
	err = bus.Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, sender).Store(&pid)
	return uid, pid, err
}

// reboot is Reboot(b interactive): method_do_shutdown_or_sleep.
func (l *standinLogind) reboot(c busCall) ([]any, *dbus.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	uid, _, err := l.callerCreds(l.conn, c.sender)
	if err != nil {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.Failed", []any{fmt.Sprintf("caller's credentials: %v", err)})
	}
	r := LogindReboot{UID: uid, Interactive: c.args[0].(bool)}
	refuse := func(name, msg string) ([]any, *dbus.Error) {
		r.Err = name
		l.rec.Reboots = append(l.rec.Reboots, r)
		return nil, dbus.NewError(name, []any{msg})
	}
	if l.delayed {
		return refuse(errOperationInProgress, "There's already a shutdown or sleep operation in progress")
	}
	// verify_shutdown_creds: the node has no sessions, so the action is
	// org.freedesktop.login1.reboot (or ...-ignore-inhibit under a block
	// inhibitor); bus_verify_polkit_async grants a caller of logind's own
	// uid, root, without polkit; anyone else would be asked of polkit,
	// which the node lacks, and "no polkit" is access denied.
	if uid != 0 {
		return refuse(errAccessDenied, "Access denied")
	}
	l.rec.Reboots = append(l.rec.Reboots, r)
	// bus_manager_shutdown_or_sleep_now_or_later: tell everybody, then
	// wait for the delay inhibitors or reboot at once.
	l.prepare(true)
	l.delayed = true
	if l.delayMax > 0 && l.delayHeld() {
		l.timer = time.AfterFunc(l.delayMax, l.delayTimeout)
		return nil, nil
	}
	if err := l.execute(); err != nil {
		l.delayed = false
		l.prepare(false)
		return nil, dbus.MakeFailedError(err)
	}
	return nil, nil
}

// prepare sends PrepareForShutdown(active) (send_prepare_for). Called
// with l.mu held.
func (l *standinLogind) prepare(active bool) {
	if len(l.rec.PrepareForShutdown) == 0 {
		l.rec.PreparedAt = time.Now()
	}
	l.rec.PrepareForShutdown = append(l.rec.PrepareForShutdown, active)
	_ = l.conn.Emit(logindPath, logindManager+".PrepareForShutdown", active)
}

// delayHeld: a delay inhibitor of shutdown is held, by anyone
// (manager_is_inhibited(..., INHIBIT_DELAY, ...)). Called with l.mu held.
func (l *standinLogind) delayHeld() bool {
	for i := range l.held {
		in := l.rec.Inhibitors[i]
		if in.Mode == "delay" && slices.Contains(strings.Split(in.What, ":"), "shutdown") {
			return true
		}
	}
	return false
}

// execute asks systemd for reboot.target as logind does, over the bus
// (execute_shutdown_or_sleep: StartUnit(target, "replace-irreversibly")).
// Called with l.mu held.
func (l *standinLogind) execute() error {
	l.executed = true
	l.rec.RebootTargetAt = time.Now()
	return l.conn.Object(systemdName, systemdPath).Call(systemdManager+".StartUnit", 0, rebootTarget, "replace-irreversibly").Err
}

// delayTimeout is InhibitDelayMaxSec passing with a delay inhibitor held
// (manager_inhibit_timeout_handler -> manager_dispatch_delayed(m, true)).
func (l *standinLogind) delayTimeout() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.executed {
		return
	}
	l.rec.DelayTimedOut = true
	_ = l.execute()
}

// inhibit is Inhibit(what, who, why, mode) -> h (method_inhibit).
func (l *standinLogind) inhibit(c busCall) ([]any, *dbus.Error) {
	what, who, why, mode := c.args[0].(string), c.args[1].(string), c.args[2].(string), c.args[3].(string)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range strings.Split(what, ":") {
		if !slices.Contains(inhibitWhat, w) {
			return nil, dbus.NewError(errInvalidArgs, []any{"Invalid what specification " + what})
		}
	}
	if mode != "block" && mode != "delay" {
		return nil, dbus.NewError(errInvalidArgs, []any{"Invalid mode specification " + mode})
	}
	ws := strings.Split(what, ":")
	if mode == "delay" && slices.ContainsFunc(ws, func(w string) bool { return w != "shutdown" && w != "sleep" }) {
		return nil, dbus.NewError(errInvalidArgs, []any{"Delay inhibitors only supported for shutdown and sleep"})
	}
	if l.delayed && slices.Contains(ws, "shutdown") {
		return nil, dbus.NewError(errOperationInProgress, []any{"The operation inhibition has been requested for is already running"})
	}
	uid, pid, err := l.callerCreds(l.conn, c.sender)
	if err != nil {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.Failed", []any{fmt.Sprintf("caller's credentials: %v", err)})
	}
	// org.freedesktop.login1.inhibit-*: granted to root without polkit,
	// refused to others on a node without polkit (as for Reboot).
	if uid != 0 {
		return nil, dbus.NewError(errAccessDenied, []any{"Access denied"})
	}
	l.counter++
	r, wfd, err := l.fifo(l.counter)
	if err != nil {
		return nil, dbus.MakeFailedError(err)
	}
	idx := len(l.rec.Inhibitors)
	l.rec.Inhibitors = append(l.rec.Inhibitors, Inhibitor{What: what, Who: who, Why: why, Mode: mode, UID: uid, PID: pid, Taken: time.Now()})
	l.held[idx] = r
	go l.watch(idx, r)
	// The caller's copy of the fd is the lock: ours goes once the reply
	// carrying it is written (sd_bus_reply_method_return, then the
	// _cleanup_close_ of fifo_fd).
	_ = c.reply(l.conn, dbus.UnixFD(wfd))
	_ = syscall.Close(wfd)
	return nil, nil
}

// fifo makes inhibitor id's fifo and opens both ends as logind does
// (inhibitor_create_fifo: mkfifo 0600, the read end O_NONBLOCK for
// logind, the write end O_NONBLOCK for the caller).
func (l *standinLogind) fifo(id int) (r *os.File, wfd int, err error) {
	if err := os.MkdirAll(l.fifoDir, 0o755); err != nil {
		return nil, -1, err
	}
	p := filepath.Join(l.fifoDir, fmt.Sprintf("%d.ref", id))
	if err := syscall.Mkfifo(p, 0o600); err != nil && err != syscall.EEXIST {
		return nil, -1, fmt.Errorf("mkfifo %s: %w", p, err)
	}
	rfd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("open %s: %w", p, err)
	}
	wfd, err = syscall.Open(p, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = syscall.Close(rfd)
		return nil, -1, fmt.Errorf("open %s: %w", p, err)
	}
	// A non-blocking read end: Go's poller waits for its hang-up. The
	// write end stays a raw fd: os.File.Fd would make it blocking, for
	// the caller too (one open file description).
	return os.NewFile(uintptr(rfd), p), wfd, nil
}

// watch waits until every copy of inhibitor idx's fd is closed (the
// fifo's read end sees EOF: inhibitor_dispatch_fifo), releases it and,
// if a shutdown waits for it alone, carries the shutdown out
// (manager_dispatch_delayed).
func (l *standinLogind) watch(idx int, r *os.File) {
	buf := make([]byte, 16)
	for {
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	delete(l.held, idx)
	_ = r.Close()
	_ = os.Remove(r.Name())
	l.rec.Inhibitors[idx].Released = time.Now()
	if l.delayed && !l.executed && !l.delayHeld() {
		if l.timer != nil {
			l.timer.Stop()
		}
		_ = l.execute()
	}
}

// getProperty is Properties.Get for the Manager's properties npu-stack
// and the kubelet read; others are unknown as sd-bus answers them
// (bus-objects.c object_find_and_run).
func (l *standinLogind) getProperty(c busCall) ([]any, *dbus.Error) {
	props := l.properties()
	v, ok := props[c.args[1].(string)]
	if !ok || c.args[0].(string) != logindManager {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{fmt.Sprintf("Unknown interface %s or property %s.", c.args[0], c.args[1])})
	}
	return []any{v}, nil
}

func (l *standinLogind) getAll(c busCall) ([]any, *dbus.Error) {
	if c.args[0].(string) != logindManager {
		return []any{map[string]dbus.Variant{}}, nil
	}
	return []any{l.properties()}, nil
}

// properties: InhibitDelayMaxUSec (t, µs), which the kubelet compares
// with its shutdownGracePeriod, and PreparingForShutdown (b).
func (l *standinLogind) properties() map[string]dbus.Variant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return map[string]dbus.Variant{
		"InhibitDelayMaxUSec":  dbus.MakeVariant(uint64(l.delayMax / time.Microsecond)),
		"PreparingForShutdown": dbus.MakeVariant(l.delayed),
	}
}

// stop ends the boot's logind: no shutdown is carried out any more, the
// fifos' read ends close (the node's /run goes with the boot).
func (l *standinLogind) stop() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	for _, r := range l.held {
		_ = r.Close()
	}
}

// record is a copy of the boot's record.
func (l *standinLogind) record() LogindRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := *l.rec
	r.Reboots = slices.Clone(r.Reboots)
	r.Inhibitors = slices.Clone(r.Inhibitors)
	r.PrepareForShutdown = slices.Clone(r.PrepareForShutdown)
	return r
}
