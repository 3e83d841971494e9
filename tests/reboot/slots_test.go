package reboot_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/slots"
)

// Many nodes racing for few slots on the real API server: exactly as many
// win as there are slots, each a different one, however the races go.
func TestSlotsAreRaceFreeOnTheAPIServer(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rb-slots-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const holders, count = 12, 3
	all := make([]*slots.Slots, holders)
	for i := range all {
		if all[i], err = slots.New(slots.Config{Client: env.Client, Namespace: nsObj.Name, Count: count, TTL: time.Hour, Holder: fmt.Sprintf("node-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	race := func() map[string]int {
		var mu sync.Mutex
		won := map[string]int{}
		var wg sync.WaitGroup
		for i, s := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Acquire(context.Background())
				if err != nil {
					t.Errorf("holder %d: %v", i, err)
					return
				}
				if res.Slot != "" {
					mu.Lock()
					won[res.Slot]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return won
	}
	won := race()
	if len(won) != count {
		t.Fatalf("slots won: %v, want each of the %d slots once", won, count)
	}
	for slot, n := range won {
		if n != 1 {
			t.Fatalf("slot %s won by %d holders", slot, n)
		}
	}
	// Acquire again: the winners renew their own slot, nobody else wins.
	if again := race(); len(again) != count {
		t.Fatalf("second round: %v", again)
	}
	leases, err := env.Client.CoordinationV1().Leases(nsObj.Name).List(ctx, metav1.ListOptions{})
	if err != nil || len(leases.Items) != count {
		t.Fatalf("leases: %v, %d", err, len(leases.Items))
	}
	holder := *leases.Items[0].Spec.HolderIdentity
	var releaser *slots.Slots
	for i := range all {
		if fmt.Sprintf("node-%d", i) == holder {
			releaser = all[i]
		}
	}
	if err := releaser.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// One slot is free again: exactly one new winner (the others renew).
	if after := race(); len(after) != count || after[leases.Items[0].Name] != 1 {
		t.Fatalf("after a release: %v", after)
	}
}
