package rollout

// The writers: the node writes, evictions and pod deletions that carry
// out a decision's actions, taken from a queue while the loop goes on
// deciding.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// startWriters starts WritesInFlight writers on a new queue; stop returns
// once every queued write and every eviction has ended.
func (c *Controller) startWriters(ctx context.Context) (q workqueue.TypedInterface[string], stop func()) {
	q = workqueue.NewTyped[string]()
	var writers sync.WaitGroup
	for range c.cfg.WritesInFlight {
		writers.Go(func() { c.writer(ctx, q) })
	}
	return q, func() {
		// Queued writes still go out (against an ended ctx they fail at
		// once): a node must not stay marked busy behind a dead writer.
		q.ShutDown()
		writers.Wait()
		c.background.Wait()
	}
}

func (c *Controller) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.evicting) == 0 && len(c.queued) == 0
}

// enqueue hands a decision's actions to the writers, one item per node:
// a node's own actions keep their order, while the nodes go out several
// at once (each action is conditional on its node's resourceVersion, so
// the order across nodes does not matter, and one write at a time would
// bound a large rollout by the API server's round-trip time).
func (c *Controller) enqueue(q workqueue.TypedInterface[string], acts []Action) {
	var order []string
	fresh := map[string]bool{}
	c.mu.Lock()
	for _, a := range acts {
		_, queued := c.queued[a.Node]
		switch {
		case !queued:
			order = append(order, a.Node)
			fresh[a.Node] = true
		case !fresh[a.Node]:
			// Decisions skip busy nodes, so this is a bug; dropping the
			// action is safe (the next decision redoes it), appending it
			// to writes under way is not (their release would drop it).
			c.cfg.Log.WithField("node", a.Node).Errorf("not applying %s: the node has writes on their way", a.Kind)
			continue
		}
		c.queued[a.Node] = append(c.queued[a.Node], a)
	}
	c.mu.Unlock()
	for _, node := range order {
		q.Add(node)
	}
}

// writer applies queued nodes' actions until q shuts down. A node stays
// busy until its actions are done, and after a failure (other than a
// stale view) for errorBackoff more, without holding up the writer.
func (c *Controller) writer(ctx context.Context, q workqueue.TypedInterface[string]) {
	for {
		node, shutdown := q.Get()
		if shutdown {
			return
		}
		c.mu.Lock()
		acts := c.queued[node]
		c.mu.Unlock()
		ok := true
		for _, a := range acts {
			if !c.apply(ctx, a) {
				ok = false
			}
		}
		release := func() {
			c.mu.Lock()
			delete(c.queued, node)
			c.mu.Unlock()
			c.poke()
		}
		if ok || ctx.Err() != nil {
			release()
		} else {
			c.background.Add(1)
			go func() {
				defer c.background.Done()
				select {
				case <-ctx.Done():
				case <-c.cfg.Clock.After(errorBackoff):
				}
				release()
			}()
		}
		q.Done(node)
	}
}

// apply carries out a; false means it failed for a reason other than a
// stale view, and the decision should be retried after a pause.
func (c *Controller) apply(ctx context.Context, a Action) bool {
	log := c.cfg.Log.WithFields(logrus.Fields{"node": a.Node, "action": a.Kind, "from": a.From, "to": a.To})
	switch a.Kind {
	case ActTransition:
		if err := c.transition(ctx, a, a.ResourceVersion); err != nil {
			return logConflict(log, err, "transition")
		}
	case ActEvict:
		c.mu.Lock()
		c.evicting[a.Node] = true
		c.mu.Unlock()
		log.Info(a.Message)
		c.background.Add(1)
		go c.runEvict(ctx, a, log)
	case ActDeletePods:
		if err := c.deletePods(ctx, a, log); err != nil {
			return logConflict(log, err, "re-roll")
		}
	}
	return true
}

// transition patches the node if it is still at rv ("" = re-read it and
// check it is still in a.From) and records the events.
func (c *Controller) transition(ctx context.Context, a Action, rv string) error {
	log := c.cfg.Log.WithFields(logrus.Fields{"node": a.Node, "from": string(a.From), "to": string(a.To)})
	if len(a.Via) > 0 {
		log = log.WithField("via", a.Via)
	}
	if rv == "" {
		cur, err := c.cfg.Client.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node %s: %w", a.Node, err)
		}
		if got := cur.Labels[c.cfg.Keys.UpgradeState()]; got != string(a.From) {
			return fmt.Errorf("node %s moved to %q meanwhile; not applying %s", a.Node, got, a.To)
		}
		rv = cur.ResourceVersion
	}
	node, err := kube.PatchNodeIf(ctx, c.cfg.Client, a.Node, rv, a.Change)
	if err != nil {
		return err
	}
	c.remember(node)
	if a.From != a.To {
		log.Info(a.Message)
	}
	if c.cfg.Recorder != nil {
		if a.From != a.To {
			c.cfg.Recorder.Node(node, false, contract.EventNPUDriverUpgrade, "%s: %s", statePath(a), a.Message)
		}
		for _, e := range a.Events {
			c.cfg.Recorder.Node(node, e.Warning, e.Reason, "%s", e.Message)
		}
	}
	return nil
}

// statePath names every state a (chained) transition passes:
// "upgrade-required → cordon-required → … → reboot-required".
func statePath(a Action) string {
	names := []string{stateName(a.From)}
	for _, s := range a.Via {
		names = append(names, stateName(s))
	}
	return strings.Join(append(names, stateName(a.To)), " → ")
}

func stateName(s contract.UpgradeState) string {
	if s == contract.StateDone {
		return "up-to-date"
	}
	return string(s)
}

func (c *Controller) runEvict(ctx context.Context, a Action, log logrus.FieldLogger) {
	defer func() {
		defer c.background.Done()
		c.mu.Lock()
		delete(c.evicting, a.Node)
		c.mu.Unlock()
		c.poke()
	}()
	logOut := log.WithField("step", a.Step).WriterLevel(logrus.InfoLevel)
	defer func() { _ = logOut.Close() }()
	out := newBlockedWriter(logOut, func(pod, why string) {
		if c.cfg.Recorder == nil {
			return
		}
		if err := c.cfg.Recorder.NodeByName(ctx, c.cfg.Client, a.Node, true, contract.EventEvictionBlocked,
			"%s of pod %s refused: %s; the rollout retries until the step's timeout (driver.upgradePolicy.%s.timeoutSeconds): scale the workload down or relax its PodDisruptionBudget",
			a.Step, pod, why, policyKey(a.Evict)); err != nil {
			log.WithError(err).Warn("cannot record the refused eviction")
		}
	})
	err := evict(ctx, c.cfg.Client, a.Node, a.Evict, c.cfg.Policy, out)
	if ctx.Err() != nil {
		return // shutting down: the next run redoes the step
	}
	next := *a.Then
	if err != nil {
		node, gerr := c.cfg.Client.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{})
		if gerr != nil {
			log.WithError(gerr).Error("cannot record the failed eviction")
			return
		}
		s := BuildSnapshot(Inputs{Nodes: []*corev1.Node{node}}, View{Keys: c.cfg.Keys})
		next = builder{k: c.cfg.Keys, now: c.cfg.Clock.Now()}.fail(s.Nodes[0], a.Step, err.Error())
	}
	next.From = a.Then.From
	if terr := c.transition(ctx, next, ""); terr != nil {
		logConflict(log, terr, "after eviction")
	}
}

// policyKey is the values key of an eviction step's policy.
func policyKey(k EvictKind) string {
	if k == EvictDrain {
		return "drain"
	}
	return "npuPodDeletion"
}

func (c *Controller) deletePods(ctx context.Context, a Action, log logrus.FieldLogger) error {
	if !a.Change.Empty() {
		// Recorded first: a crash after the delete must not leave the old
		// pod's replacement looking like the old pod.
		node, err := kube.PatchNodeIf(ctx, c.cfg.Client, a.Node, a.ResourceVersion, a.Change)
		if err != nil {
			return err
		}
		c.remember(node)
	}
	var errs []error
	for _, p := range a.Pods {
		uid := types.UID(p.UID)
		err := c.cfg.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete pod %s/%s on node %s: %w", p.Namespace, p.Name, a.Node, err))
			continue
		}
		log.WithField("pod", p.Namespace+"/"+p.Name).Info("re-rolled pod (deleted; its DaemonSet re-creates it)")
	}
	return errors.Join(errs...)
}

// logConflict logs at debug level what the next decision will redo anyway
// (a stale view), and at error level the rest.
func logConflict(log logrus.FieldLogger, err error, what string) bool {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		log.WithError(err).Debug(what + ": stale view, deciding again")
		return true
	}
	log.WithError(err).Error(what + " failed; retrying")
	return false
}
