package driverentry

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// Backoff spaces the retries of an install: Initial after the first
// failure, doubling up to Max.
type Backoff struct {
	Initial, Max time.Duration
}

// DefaultBackoff is the backoff when none is configured.
var DefaultBackoff = Backoff{Initial: 30 * time.Second, Max: 10 * time.Minute}

// Validate refuses a backoff that would spin or never grow.
func (b Backoff) Validate() error {
	switch {
	case b == Backoff{}:
		return nil
	case b.Initial <= 0:
		return fmt.Errorf("--retry-backoff %s must be positive", b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("--retry-backoff-max %s must be at least --retry-backoff %s", b.Max, b.Initial)
	}
	return nil
}

// Delay is the wait before retry number attempt (0 = the first retry).
func (b Backoff) Delay(attempt int) time.Duration {
	if b == (Backoff{}) {
		b = DefaultBackoff
	}
	d := b.Initial
	for i := 0; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// RetryError is an install that did not happen and is tried again by
// this pod: blocked by a process holding the chips, or failed. It never
// leads to a reboot.
type RetryError struct {
	// Reason is the Event's reason: DriverInstallBlocked or
	// DriverInstallFailed. Status is the first word of the node's
	// install-status annotation.
	Reason contract.EventReason
	Status string
	Msg    string
	Err    error
	node   *corev1.Node
}

func (e *RetryError) Error() string { return e.Msg }
func (e *RetryError) Unwrap() error { return e.Err }

// retry runs try until it returns anything but a *RetryError, waiting
// Config.Retry between tries. Each retry is announced where a user looks:
// an Event with the reason and the next try, the node's install-status
// annotation (npu-hooks status shows it) and the log.
func retry(ctx context.Context, cfg Config, d Deps, try func() error) error {
	clk := d.clock()
	for attempt := 0; ; attempt++ {
		err := try()
		var re *RetryError
		if !errors.As(err, &re) || ctx.Err() != nil {
			return err
		}
		wait := cfg.Retry.Delay(attempt)
		next := clk.Now().Add(wait).UTC().Format(time.RFC3339)
		msg := fmt.Sprintf("%s; tried %d time(s), next try in %s (at %s) by the driver pod itself; to try now: %s",
			re.Msg, attempt+1, wait, next, contract.DriverRetryCommand(cfg.Namespace, cfg.NodeName))
		d.Log.WithError(err).WithField("retryIn", wait).Warn("driver install not done; retrying")
		node := re.node
		if node == nil {
			node = &corev1.Node{}
			node.Name = cfg.NodeName
		}
		d.Events.Node(node, true, re.Reason, "%s", msg)
		status := fmt.Sprintf("%s: %s; next try at %s", re.Status, re.Msg, next)
		if _, perr := d.Nodes.Patch(ctx, cfg.NodeName, kube.NodeChange{Annotations: map[string]*string{cfg.Keys.InstallStatus(): kube.Set(status)}}); perr != nil {
			d.Log.WithError(perr).Warn("could not record the install status on the node")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(wait):
		}
	}
}
