package e2e_test

import (
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestUpgradeRollbackUpgradeUpgradeWithinAnHour: four driver changes
// within the loop guard's window (3 reboots per hour by default), each
// reboot loading the version it was asked for, finish without a refusal:
// the loop guard counts only reboots that did not achieve their purpose.
func TestUpgradeRollbackUpgradeUpgradeWithinAnHour(t *testing.T) {
	t.Parallel() // its own namespace, release and nodes: see main_test.go
	ctx := ctxTimeout(t, 15*time.Minute)
	s := newStack(t, "", "", 2, 0)
	delete(s.vals["rebooter"].(map[string]any), "rebootBudget") // the chart's default: 3 per 60 minutes
	if _, err := s.helm.Install(ctx, s.release, s.vals, testbed.InstallOptions{}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	s.check(ctx, v1, 0)
	opts := testbed.InstallOptions{Timeout: 6 * time.Minute}
	s.setVersion(v2)
	if _, err := s.helm.Upgrade(ctx, s.release, s.vals, opts); err != nil {
		t.Fatalf("helm upgrade to %s: %v", v2, err)
	}
	s.check(ctx, v2, 1)
	if err := s.helm.Rollback(s.release, 1, opts); err != nil {
		t.Fatalf("helm rollback to %s: %v", v1, err)
	}
	s.check(ctx, v1, 2)
	for i, v := range []string{"25.6.0", "25.7.0"} {
		s.setVersion(v)
		if _, err := s.helm.Upgrade(ctx, s.release, s.vals, opts); err != nil {
			t.Fatalf("helm upgrade to %s (%d reboots within the hour so far): %v", v, 2+i, err)
		}
		s.check(ctx, v, 3+i)
	}
}
