package scenario

import (
	"context"
	"testing"
	"time"
)

// Both sides' clocks start at one instant, taken when the last of them
// arrives: never before the later side was ready.
func TestGateStartsBothClocksAtOneInstant(t *testing.T) {
	g := newGate(2)
	ctx := context.Background()
	first := make(chan time.Time, 1)
	go func() { first <- g.wait(ctx) }()
	before := time.Now()
	second := g.wait(ctx)
	if got := <-first; !got.Equal(second) || second.Before(before) {
		t.Fatalf("clocks started at %v and %v; want one instant, not before the second side came at %v", got, second, before)
	}
}

// One side alone never opens the gate: it waits until ctx ends (the other
// side failed before its gate).
func TestGateHoldsOneSideUntilTheOtherOrTheEnd(t *testing.T) {
	g := newGate(2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.wait(ctx); close(done) }()
	cancel()
	<-done
	select {
	case <-g.open:
		t.Fatal("the gate opened with one side of two")
	default:
	}
}
