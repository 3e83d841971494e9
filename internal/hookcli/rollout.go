package hookcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/profile"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

type rolloutFlags struct {
	cluster       clusterFlags
	policy        policyFlags
	resume        bool
	leaseName     string
	leaseIdentity string
	leaseDuration time.Duration
	waitForLease  bool
	writes        int
	leftBehind    string
	// policyConfigMap names the ConfigMap the chart writes the policy to.
	policyConfigMap string
	record          recordFlags
	profileDir      string
}

// NewRollout is `npu-hooks rollout`.
func NewRollout(g *cli.GlobalOptions) *cobra.Command {
	var f rolloutFlags
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Move every out-of-date NPU node to its desired driver, within the upgrade policy",
		Long: `Drives each NPU node whose loaded driver differs from its profile's desired
version through the upgrade states (docs/driver-upgrade.md), event-driven, holding a
Lease so only one rollout writes at a time. All progress is kept on the
Nodes: killed at any moment, the next run continues where it stopped.

Nodes the rollout cannot move for reasons of their own (NotReady, a
recovery reboot pending, the skip label, no canary able to pass) are left
behind: the rollout finishes without them, names them with the reason in
its summary and an UpgradeLeftBehind event, and --nodes-left-behind says
whether that fails it. A node in flight is always seen through.

Outside its maintenance windows (--maintenance-window) it starts no node
and, when the window that closed last says wait, holds the upgrade
reboots not yet started; it waits for the next opening if that comes
before --deadline, else it ends "waiting for window" (exit 0) and the
resume CronJob carries on.

Exit codes: 0 every node it can move is up to date (or the rollout is
paused, or waits for its maintenance window), and the nodes left behind
do not fail it under --nodes-left-behind; 2 the deadline passed, the failure budget is spent,
nodes failed, or nodes left behind fail it (a summary names them and the
fix); 1 any other error (safe to retry).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.Logger(cmd.ErrOrStderr())
			if err != nil {
				return cli.Terminal(err)
			}
			return profiled(f.profileDir, &f.cluster.client, log, func() error {
				return runRollout(cmd.Context(), &f, log, cmd.OutOrStdout())
			})
		},
	}
	fs := cmd.Flags()
	f.cluster.add(fs)
	f.policy.add(fs)
	host, _ := os.Hostname()
	fs.BoolVar(&f.resume, "resume", false, "resume mode (CronJob): exit 0 at once if another rollout holds the lease")
	fs.StringVar(&f.leaseName, "lease-name", "npu-stack-rollout", "name of the Lease in --namespace that makes the rollout single-writer")
	fs.StringVar(&f.leaseIdentity, "lease-identity", host, "holder identity; keep it stable across restarts of the same process (default: host name = pod name)")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "lease duration; a dead holder blocks others this long")
	fs.IntVar(&f.writes, "max-writes-in-flight", rollout.DefaultWritesInFlight, "nodes written at once (each write a conditional patch of its own node); decisions go on while writes are on their way")
	fs.StringVar(&f.leftBehind, "nodes-left-behind", string(contract.LeftBehindFailIfOutOfDate),
		"whether nodes the rollout could not move fail a finished rollout (exit 2): fail-if-out-of-date (only if one still runs an out-of-date driver and is not skipped by its label), always-succeed, fail")
	fs.StringVar(&f.policyConfigMap, "policy-configmap", "",
		"ConfigMap in --namespace holding the policy flags (key args), which the chart rewrites at every upgrade: read at the start and watched, so the newest policy takes effect at once, in a run already under way too; empty: the flags only")
	f.record.add(fs)
	fs.BoolVar(&f.waitForLease, "wait-for-lease", true, "wait while another rollout holds the lease (false: exit 2 with its holder)")
	fs.StringVar(&f.profileDir, "profile-dir", "",
		"write this run's profiles to the directory (created if need be; make bench sets it): "+profile.CPUFile+" (CPU, the whole run), "+profile.HeapFile+" (heap at exit), "+profile.HeapPeakFile+" (heap near its peak), "+
			profile.PeakFile+" (peak goroutines and heap in use, sampled every second, and the time the API requests took); empty: none")
	return cmd
}

func runRollout(ctx context.Context, f *rolloutFlags, log *logrus.Logger, out io.Writer) error {
	cl, err := f.cluster.parse()
	if err != nil {
		return cli.Terminal(err)
	}
	// The flags must be valid even when the ConfigMap overrides them.
	if _, err := f.flagPolicy(); err != nil {
		return cli.Terminal(err)
	}
	if f.writes < 1 {
		return cli.Terminalf("--max-writes-in-flight %d: must be at least 1", f.writes)
	}
	client, _, err := f.cluster.client.Client()
	if err != nil {
		return err
	}
	if f.policy.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.policy.deadline)
		defer cancel()
	}
	rec := kube.NewRecorder(client, rollout.EventSource)
	defer rec.Shutdown()
	lc := rollout.LeaseConfig{
		Client: client, Namespace: f.cluster.namespace, Name: f.leaseName, Identity: f.leaseIdentity,
		Duration: f.leaseDuration, Wait: f.waitForLease && !f.resume, Log: log,
	}
	var final rollout.Decision
	var snap rollout.Snapshot
	var mode contract.LeftBehindMode
	var passes int64
	// runControllers runs controllers until the rollout ends, a new one
	// under each newer policy.
	runControllers := func(ctx context.Context, observer cache.ResourceEventHandler) error {
		for {
			rp, err := f.currentPolicy(ctx, client)
			if err != nil {
				return cli.Terminal(err)
			}
			mode = rp.mode
			// A newer policy (a later helm upgrade while this run holds the
			// lease) ends this controller at once; the next one decides
			// under it from the nodes' state, holding the lease throughout.
			runCtx, cancel := context.WithCancel(ctx)
			var changed atomic.Bool
			f.watchPolicy(runCtx, client, rp.args, func() { changed.Store(true); cancel() })
			c := rollout.NewController(rollout.Config{
				Client: client, Recorder: rec, Log: log, Keys: cl.keys, Namespace: f.cluster.namespace,
				NodeSelector: cl.nodeSelector, DriverSelector: cl.driverSelector, Targets: rp.targets, Policy: rp.policy,
				WritesInFlight: f.writes, NodeObserver: observer,
			})
			rerr := c.Start(runCtx)
			if rerr == nil {
				final, rerr = c.Run(runCtx)
				snap, _ = c.Snapshot()
			}
			passes += c.Passes()
			cancel()
			if changed.Load() && ctx.Err() == nil {
				log.WithField("configmap", f.cluster.namespace+"/"+f.policyConfigMap).Info("the rollout policy changed; deciding under the new one")
				continue
			}
			return rerr
		}
	}
	run := func(ctx context.Context) error {
		log.WithField("lease", f.cluster.namespace+"/"+f.leaseName).Info("holding the rollout lease")
		record, err := f.record.recorder(ctx, client, cl, f.cluster.namespace, f.leaseName, log)
		if err != nil {
			// The record is for people; the rollout goes on without it.
			log.WithError(err).Warn("keeping no rollout record")
		}
		var observer cache.ResourceEventHandler
		if record != nil {
			observer = record
			recCtx, stopRec := context.WithCancel(ctx)
			defer stopRec()
			go record.Run(recCtx)
		}
		err = runControllers(ctx, observer)
		finishRecord(ctx, record, err, final, log)
		return err
	}
	err = rollout.WithLease(ctx, lc, run)
	defer func() { log.WithField("decisionPasses", passes).Info("rollout decisions made") }()
	// A lease lost to an API server or etcd outage is taken back once the
	// server answers: every decision is read from the Nodes again, so the
	// run goes on where it was instead of failing the Job.
	for errors.Is(err, rollout.ErrLeaseLost) && ctx.Err() == nil {
		log.WithError(err).Warn("lost the rollout lease (API server unreachable?); taking it back when the server answers")
		lc.Wait = true
		err = rollout.WithLease(ctx, lc, run)
	}
	switch {
	case errors.Is(err, rollout.ErrLeaseHeld) && f.resume:
		log.WithError(err).Info("another rollout is running; nothing to resume")
		return nil
	case errors.Is(err, rollout.ErrLeaseHeld):
		return cli.Terminal(err)
	case errors.Is(err, context.DeadlineExceeded):
		return cli.Terminalf("deadline %s passed before the rollout finished (progress is kept on the nodes; the next run resumes): %s", f.policy.deadline, summary(snap, final))
	case err != nil:
		return err
	}
	reportLeftBehind(ctx, client, rec, final.LeftBehind, log)
	switch final.Outcome {
	case rollout.Finished:
		_, _ = fmt.Fprintf(out, "rollout finished: %s\n", final.Progress)
		for _, l := range final.LeftBehind {
			_, _ = fmt.Fprintf(out, "left behind: %s (%s): %s\n", l.Node, driverNote(l), l.Reason)
		}
		if rollout.FailsRollout(mode, final.LeftBehind) {
			return cli.Terminalf("rollout finished without nodes it could not move (--nodes-left-behind=%s): %s", mode, rollout.FormatLeftBehind(final.LeftBehind))
		}
		return nil
	case rollout.Paused:
		_, _ = fmt.Fprintf(out, "rollout paused (driver.upgradePolicy.paused): %s\n", final.Progress)
		return nil
	case rollout.WaitingForWindow:
		// Not a failure: the resume CronJob (or the next upgrade) carries
		// on once the window opens.
		_, _ = fmt.Fprintf(out, "rollout waiting for window: %s; %s; the resume CronJob (hooks.resume.schedule) carries on once it opens\n",
			final.Window.Line(), final.Progress)
		return nil
	}
	return cli.Terminalf("rollout cannot finish: %s", summary(snap, final))
}

// reportLeftBehind records an UpgradeLeftBehind Warning on each node the
// rollout ends without, so `kubectl describe node` and event alerts show
// it.
func reportLeftBehind(ctx context.Context, client kubernetes.Interface, rec *kube.Recorder, left []rollout.LeftBehind, log logrus.FieldLogger) {
	for _, l := range left {
		if err := rec.NodeByName(ctx, client, l.Node, true, contract.EventUpgradeLeftBehind,
			"the driver rollout ended without this node (%s): %s", driverNote(l), l.Reason); err != nil {
			log.WithError(err).WithField("node", l.Node).Warn("cannot record the node left behind")
		}
	}
}

func driverNote(l rollout.LeftBehind) string {
	if l.OutOfDate {
		return "driver out of date"
	}
	return "driver up to date"
}

// summary names the nodes that are not done and why.
func summary(s rollout.Snapshot, d rollout.Decision) string {
	var lines []string
	for _, n := range s.Nodes {
		if w := d.Waiting[n.Name]; w != "" {
			lines = append(lines, fmt.Sprintf("%s (%s): %s", n.Name, stateOrDone(n), w))
		}
	}
	sort.Strings(lines)
	msg := d.Progress.String()
	if len(lines) > 0 {
		msg += "; " + strings.Join(lines, "; ")
	}
	if len(s.Missing) > 0 {
		msg += "; re-roll targets not found: " + strings.Join(s.Missing, ", ")
	}
	return msg
}

func stateOrDone(n rollout.NodeView) string {
	if n.RawState == "" {
		return "no state"
	}
	return n.RawState
}
