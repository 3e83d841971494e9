package reboot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

func pod(name string, terminating bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
	if terminating {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// A recovery drain that runs out of time goes on to the reboot when every
// pod it waits for is terminating (stuck in D state on the wedged chip),
// naming them; anything else stops it.
func TestJudgeDrain(t *testing.T) {
	timeout := fmt.Errorf("drain: %w", wait.ErrorInterrupted(context.DeadlineExceeded))
	refused := errors.New(`pods "train-0" is forbidden: npu-stack node-agent policy`)
	for _, tc := range []struct {
		name      string
		err       error
		timedOut  bool
		remaining []corev1.Pod
		left      []string
		fail      string
	}{
		{name: "every pod gone in time"},
		{name: "timed out, pods stuck terminating: reboot anyway", err: timeout, timedOut: true,
			remaining: []corev1.Pod{pod("train-0", true), pod("train-1", true)}, left: []string{"ml/train-0", "ml/train-1"}},
		{name: "timed out, the pods went meanwhile", err: timeout, timedOut: true},
		{name: "timed out with a pod never deleted", err: timeout, timedOut: true,
			remaining: []corev1.Pod{pod("train-0", true), pod("infer-0", false)}, fail: "ml/infer-0"},
		{name: "deletion refused", err: refused, fail: "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left, err := judgeDrain(tc.err, tc.timedOut, tc.remaining)
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("error %v, want one naming %q", err, tc.fail)
				}
				return
			}
			if err != nil || !slices.Equal(left, tc.left) {
				t.Fatalf("left %v, err %v; want %v and the reboot", left, err, tc.left)
			}
		})
	}
}

func TestTimedOutIsTheDrainsOwnTimeout(t *testing.T) {
	interrupted := wait.ErrorInterrupted(context.DeadlineExceeded)
	if !timedOut(context.Background(), interrupted) {
		t.Error("the drain's timeout not recognised")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if timedOut(ctx, interrupted) {
		t.Error("a shutdown taken for the drain's timeout: the reboot would go ahead without waiting")
	}
	if timedOut(context.Background(), errors.New("connection refused")) {
		t.Error("an API error taken for a timeout")
	}
}
