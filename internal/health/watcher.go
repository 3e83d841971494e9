package health

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/marker"
)

// EventRecorder emits Events on Nodes (kube.Recorder in the binary).
type EventRecorder interface {
	Node(node *corev1.Node, warning bool, reason contract.EventReason, format string, args ...any)
}

// Config is what the watch is told.
type Config struct {
	NodeName string
	Keys     contract.Keys
	Markers  marker.Dir
	Interval time.Duration
	Timeout  time.Duration
	Policy   Policy
	// ExpectedChips is the chip count a probe must see; 0 = the count the
	// driver entry recorded at driver load (no check if none was).
	ExpectedChips int
	// LoopGuard is the rebooter's loop guard (rebooter.rebootBudget): a
	// withdrawn wedge is recorded in its history, kept as short as the
	// rebooter keeps it.
	LoopGuard budget.Budget
}

// Validate rejects a configuration that could never detect anything.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("--node-name is empty: set it from the downward API (spec.nodeName)")
	case c.Interval <= 0:
		return fmt.Errorf("--probe-interval %s must be positive", c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("--probe-timeout %s must be positive", c.Timeout)
	case c.Policy.FailureThreshold < 1:
		return fmt.Errorf("--failure-threshold %d must be at least 1", c.Policy.FailureThreshold)
	case c.Policy.RecoveryThreshold < 1:
		return fmt.Errorf("--recovery-threshold %d must be at least 1", c.Policy.RecoveryThreshold)
	case c.LoopGuard.Max < 1:
		return fmt.Errorf("--max-reboots %d must be at least 1", c.LoopGuard.Max)
	case c.ExpectedChips < 0:
		return fmt.Errorf("--expected-chips %d must not be negative", c.ExpectedChips)
	}
	return nil
}

// Watcher probes the chips and keeps the Node and marker directory in
// line with what Decide says.
type Watcher struct {
	cfg     Config
	nodes   kube.NodeClient
	host    host.Host
	clock   clock.WithTickerAndDelayedExecution
	prober  Prober
	events  EventRecorder
	metrics *Metrics
	plugin  PluginWithdrawer
	log     logrus.FieldLogger

	state State
	// markerSeen is whether the last step saw the marker, so that a marker
	// written by the driver entry triggers a probe at once.
	markerSeen bool
	// pausedFor is the driver version whose install holds the chips
	// while the probes are paused, "" while probing.
	pausedFor string
}

// Deps are the watcher's collaborators; Metrics and Plugin may be nil.
type Deps struct {
	Nodes   kube.NodeClient
	Host    host.Host
	Clock   clock.WithTickerAndDelayedExecution
	Events  EventRecorder
	Metrics *Metrics
	// Plugin withdraws the device plugin of a wedged node
	// (--device-plugin-selector); nil leaves it alone.
	Plugin PluginWithdrawer
	Log    logrus.FieldLogger
}

// NewWatcher builds a watcher; call Run or Step.
func NewWatcher(cfg Config, d Deps) *Watcher {
	return &Watcher{
		cfg: cfg, nodes: d.Nodes, host: d.Host, clock: d.Clock, events: d.Events, metrics: d.Metrics, plugin: d.Plugin,
		log:    d.Log.WithField("node", cfg.NodeName),
		prober: NewProber(d.Host, d.Clock, cfg.Timeout),
	}
}

// Run probes every Interval, and at once when the marker appears, until
// ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	if err := w.cfg.Validate(); err != nil {
		return err
	}
	changes, err := w.watchMarkers(ctx)
	if err != nil {
		w.log.WithError(err).Warn("marker directory not watched; a new marker is seen at the next probe")
	}
	w.log.WithFields(logrus.Fields{"interval": w.cfg.Interval, "timeout": w.cfg.Timeout, "threshold": w.cfg.Policy.FailureThreshold}).Info("health-watch started")
	w.stepLogged(ctx)
	timer := w.clock.NewTimer(w.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			w.stepLogged(ctx)
			timer.Reset(w.cfg.Interval)
		case <-changes:
			if _, present, err := w.cfg.Markers.Ready(); err == nil && present && !w.markerSeen {
				w.stepLogged(ctx)
				if !timer.Stop() {
					select {
					case <-timer.C():
					default:
					}
				}
				timer.Reset(w.cfg.Interval)
			}
		}
	}
}

func (w *Watcher) watchMarkers(ctx context.Context) (<-chan struct{}, error) {
	if err := mkdirAll(w.cfg.Markers.Path); err != nil {
		return nil, err
	}
	return w.cfg.Markers.Changes(ctx)
}

func (w *Watcher) stepLogged(ctx context.Context) {
	if err := w.Step(ctx); err != nil && ctx.Err() == nil {
		w.log.WithError(err).Warn("health step failed; retrying at the next probe")
	}
}

// Step runs one probe and applies the decision.
//
// Node-local safety comes first: a wedge takes the marker away before any
// API call, so the driver pod turns NotReady and a device-plugin pod that
// starts waits at its gate. The device plugin already running does not
// read the marker: it stops advertising the chips only once withdrawPlugin
// has deleted its pod, an API call, so a node cut off from the API server
// (or whose writes are refused) keeps offering them until then. The Node,
// the Events and the withdrawal follow, decided on a fresh read of the
// Node; a failed API call is retried at the next probe.
func (w *Watcher) Step(ctx context.Context) error {
	if paused, err := w.pause(ctx); paused || err != nil {
		return err
	}
	_, markerPresent, err := w.cfg.Markers.Ready()
	if err != nil {
		return err
	}
	recorded, err := w.cfg.Markers.Wedged()
	if err != nil {
		return err
	}
	expected, err := w.expectedChips()
	if err != nil {
		return err
	}
	res := w.prober.Probe(ctx, expected)
	if ctx.Err() != nil {
		// Shutting down: a cancelled probe says nothing about the chips.
		return ctx.Err()
	}
	obs := Observation{Probe: res, Marker: markerPresent, WedgeRecorded: recorded}
	prev := w.state
	local, err := w.withdrawLocally(prev, obs)
	if err != nil {
		return err
	}
	// The Node may change between our read and our write (the rollout
	// setting an upgrade reboot); a conditional patch refuses that, and a
	// fresh read decides again on the same probe.
	for attempt := 0; ; attempt++ {
		node, err := w.nodes.Get(ctx, w.cfg.NodeName)
		if err != nil {
			w.nodeUnreachable(res, obs, local)
			return fmt.Errorf("node %s: %w; the chips' marker is already in line with the probe, the Node is updated at the next probe once the API server answers (check the API server address and that the health-watch ServiceAccount may get and patch nodes)", w.cfg.NodeName, err)
		}
		obs.Node = w.view(node)
		st, acts := Decide(w.cfg.Policy, prev, obs)
		w.logProbe(res, st, obs)
		err = w.apply(ctx, node, res, acts)
		if apierrors.IsConflict(err) && attempt < 3 {
			continue
		}
		if res.OK && prev.Failures > 0 && !acts.WithdrawRecovery && !acts.RestoreMarker {
			// Worth a line: a flaky chip shows up here long before it wedges.
			w.log.WithField("failures", prev.Failures).Info("chip probe passed again below the failure threshold; no action")
		}
		if st.Passes > 0 {
			w.log.WithField("passes", st.Passes).Infof("chip probe passed while wedged; %d passing probes in a row undo the wedge (--recovery-threshold)", w.cfg.Policy.RecoveryThreshold)
		}
		w.state = st
		w.markerSeen = (markerPresent || acts.RestoreMarker) && !acts.RemoveMarker && !local.RemoveMarker
		w.metrics.observe(res, st, (recorded || acts.RecordWedge || obs.Node.RecoveryRequested() || acts.RequestRecovery) && !acts.ClearWedge && !acts.WithdrawRecovery)
		if err != nil {
			return fmt.Errorf("node %s: %w; retried at the next probe", w.cfg.NodeName, err)
		}
		// Wedged in this boot: the marker is gone, and the device plugin
		// must not go on advertising the chips. Checked at every probe
		// while wedged, so a failed deletion is retried.
		if (recorded || local.RecordWedge || acts.RecordWedge) && !acts.ClearWedge {
			return w.withdrawPlugin(ctx, node)
		}
		return nil
	}
}

// pause keeps npu-smi off the chips while the driver pod holds them for
// an install (the marker directory's install-hold, until the reboot): the
// vendor installer refuses while any process has a davinci node open, and
// a probe against a half-replaced driver would count as a chip failure.
// Paused, nothing is decided: the driver entry has already taken
// driver-ready away. The pause is announced once per install, by an Event
// on the Node; npu-hooks status shows it from the driver pod's
// install-status annotation.
func (w *Watcher) pause(ctx context.Context) (bool, error) {
	version, held, err := w.cfg.Markers.Hold()
	if err != nil {
		return false, err
	}
	if !held {
		if w.pausedFor != "" {
			w.log.WithField("install", w.pausedFor).Info("the chips are no longer held for an install: probes resume")
			w.pausedFor = ""
		}
		return false, nil
	}
	if w.pausedFor == version {
		return true, nil
	}
	node, err := w.nodes.Get(ctx, w.cfg.NodeName)
	if err != nil {
		return true, fmt.Errorf("node %s: health probes paused for the install of driver %s, but the Event could not be emitted: %w", w.cfg.NodeName, version, err)
	}
	w.pausedFor = version
	w.state = State{}
	w.log.WithField("install", version).Info("the driver pod holds the chips for an install: health probes paused until the reboot")
	w.events.Node(node, false, contract.EventHealthProbesPaused, "node %s: health probes paused: the driver pod stopped everything that opens the chips to install driver %s; probing resumes after the reboot that loads it", w.cfg.NodeName, version)
	return true, nil
}

// localDecision is what one probe decides before the Node is read.
type localDecision struct {
	State
	Actions
}

// withdrawLocally decides on the probe and the marker directory alone (as
// if the Node asked for nothing) and carries out only what takes readiness
// away: record the wedge, then remove the marker. Giving readiness back
// waits for the Node (apply), so a node never advertises chips that its
// Node still reports wedged. Without the Node a wedge is seen at the
// threshold or from this boot's record, never earlier than Decide on the
// fresh Node would see it, so this never removes a marker that the full
// decision would keep.
func (w *Watcher) withdrawLocally(prev State, obs Observation) (localDecision, error) {
	st, acts := Decide(w.cfg.Policy, prev, obs)
	d := localDecision{State: st, Actions: Actions{RecordWedge: acts.RecordWedge, RemoveMarker: acts.RemoveMarker}}
	m := w.cfg.Markers
	if d.RecordWedge {
		if err := m.RecordWedge(obs.Probe.Reason); err != nil {
			return d, fmt.Errorf("node %s: record the wedge in %s: %w; check that the marker directory is writable", w.cfg.NodeName, m.Path, err)
		}
	}
	if d.RemoveMarker {
		if err := m.ClearReady(); err != nil {
			return d, fmt.Errorf("node %s: remove the driver-ready marker %s: %w; check that the marker directory is writable", w.cfg.NodeName, m.ReadyFile(), err)
		}
		w.log.WithField("reason", obs.Probe.Reason).Warn("chips wedged: driver-ready marker removed; updating the Node next")
	}
	return d, nil
}

// nodeUnreachable keeps what this probe counted although the Node could not
// be read, so that failures go on counting towards the threshold while the
// API server is away.
func (w *Watcher) nodeUnreachable(res Result, obs Observation, local localDecision) {
	w.logProbe(res, local.State, obs)
	// The problem is not reported yet (no Event without the Node): keep
	// what was reported so the next probe with the Node reports it.
	local.Problem = w.state.Problem
	w.state = local.State
	w.markerSeen = obs.Marker && !local.RemoveMarker
	w.metrics.observe(res, local.State, (obs.WedgeRecorded || local.RecordWedge) && !local.ClearWedge)
}

func (w *Watcher) expectedChips() (int, error) {
	if w.cfg.ExpectedChips > 0 {
		return w.cfg.ExpectedChips, nil
	}
	n, _, err := w.cfg.Markers.ChipsAtLoad()
	return n, err
}

func (w *Watcher) view(n *corev1.Node) NodeView {
	k := w.cfg.Keys
	return NodeView{
		Name:           n.Name,
		RebootRequired: n.Labels[k.RebootRequired()] == contract.True,
		RebootReason:   n.Annotations[k.RebootReason()],
		DriverReady:    n.Labels[k.DriverReady()],
		RebootInFlight: n.Annotations[k.RebootFromBootID()] != "",
	}
}

func (w *Watcher) logProbe(r Result, st State, obs Observation) {
	f := w.log.WithFields(logrus.Fields{"chips": len(r.Info.Chips), "failures": st.Failures, "marker": obs.Marker})
	switch {
	case r.OK:
		f.Debug("probe ok")
	case r.Problem != nil:
		f.WithField("what", r.Problem.What).WithField("fix", r.Problem.Fix).Warn("host problem: npu-smi cannot run; not counted as a chip failure, no wedge, no reboot")
	case obs.Marker || obs.WedgeRecorded:
		f.WithField("reason", r.Reason).Warn("chip probe failed")
	default:
		f.WithField("reason", r.Reason).Debug("chip probe failed while the driver is not ready yet")
	}
}

// apply carries out acts: Node first, then the marker files in an order
// that Decide can resume from after a crash, then the Events. Taking the
// marker away has mostly been done already (withdrawLocally); doing it
// again is harmless, and covers a wedge that only the Node revealed.
func (w *Watcher) apply(ctx context.Context, node *corev1.Node, r Result, acts Actions) error {
	if acts.Empty() {
		return nil
	}
	k := w.cfg.Keys
	change := kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{}}
	if acts.DriverReady != nil {
		change.Labels[k.DriverReady()] = kube.Set(strconv.FormatBool(*acts.DriverReady))
	}
	if acts.RequestRecovery {
		change.Labels[k.RebootRequired()] = kube.Set(contract.True)
		change.Annotations[k.RebootReason()] = kube.Set(string(contract.ReasonRecovery))
	}
	if acts.WithdrawRecovery {
		change.Labels[k.RebootRequired()] = nil
		change.Annotations[k.RebootReason()] = nil
		if acts.CountWedge {
			w.countWedge(node, change)
		}
	}
	if len(change.Labels)+len(change.Annotations) > 0 {
		var err error
		if acts.RequestRecovery || acts.WithdrawRecovery {
			node, err = w.nodes.PatchIf(ctx, node.Name, node.ResourceVersion, change)
		} else {
			node, err = w.nodes.Patch(ctx, node.Name, change)
		}
		if err != nil {
			return err
		}
	}
	m := w.cfg.Markers
	if acts.RecordWedge {
		if err := m.RecordWedge(r.Reason); err != nil {
			return err
		}
	}
	if acts.RemoveMarker {
		if err := m.ClearReady(); err != nil {
			return err
		}
	}
	if acts.RestoreMarker {
		version, err := w.host.LoadedDriver(ctx)
		if err != nil || version == "" {
			version = r.Info.Version
		}
		if err := m.SetReady(version); err != nil {
			return err
		}
	}
	if acts.ClearWedge {
		if err := m.ClearWedge(); err != nil {
			return err
		}
	}
	for _, e := range acts.Events {
		w.events.Node(node, e.Warning, e.Reason, "%s", e.Message)
	}
	w.log.WithFields(logrus.Fields{
		"driverReady": fmtBoolPtr(acts.DriverReady), "requestRecovery": acts.RequestRecovery, "withdrawRecovery": acts.WithdrawRecovery,
		"removeMarker": acts.RemoveMarker, "restoreMarker": acts.RestoreMarker, "events": len(acts.Events),
	}).Info("node health changed")
	return nil
}

// countWedge adds a withdrawn wedge to the loop guard's history in change,
// which is applied conditionally on the Node read, so no concurrent write
// of the rebooter's is lost. The time is this machine's, as the
// rebooter's entries are. An unreadable history is left for the rebooter
// to refuse with its fix.
func (w *Watcher) countWedge(node *corev1.Node, change kube.NodeChange) {
	k := w.cfg.Keys
	h, err := budget.Parse(node.Annotations[k.RebootHistory()])
	if err != nil {
		w.log.WithError(err).Warn("withdrawn wedge not counted: the loop guard's history is unreadable")
		return
	}
	e := budget.Entry{At: w.clock.Now(), Reason: string(contract.PurposeWedge), Outcome: budget.Failed}
	change.Annotations[k.RebootHistory()] = kube.Set(w.cfg.LoopGuard.Record(h, e).String())
}

func fmtBoolPtr(b *bool) string {
	if b == nil {
		return "unchanged"
	}
	return strconv.FormatBool(*b)
}
