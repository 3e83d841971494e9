package driverentry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/drivertree"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// treeSim is a simulated host taking its driver as a tree: installed is
// the tree on disk (whole or not); LoadTree loads it.
type treeSim struct {
	*simhost.Host
	installed string
	whole     bool
	loads     int
	copies    []string
}

func (s *treeSim) InstalledTree() (string, bool, error) { return s.installed, s.whole, nil }

func (s *treeSim) InstallTree(_ context.Context, version, _ string) error {
	s.copies = append(s.copies, version)
	s.installed, s.whole = version, true
	return s.writeVersion(version)
}

func (s *treeSim) LoadTree(context.Context) ([]string, []string, error) {
	s.loads++
	return []string{"drv_pcie_host"}, nil, s.LoadDriver(s.installed)
}

func (s *treeSim) writeVersion(v string) error {
	p := s.Path("/usr/local/Ascend/driver/version.info")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte("Version="+v+"\n"), 0o444)
}

func treeSetup(t *testing.T, installed string, whole bool) (Config, Deps, *treeSim, *events) {
	t.Helper()
	cfg, d, h, ev := setup(t, "")
	s := &treeSim{Host: h, installed: installed, whole: whole}
	if installed != "" {
		if err := s.writeVersion(installed); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Mode, cfg.InstallCommand = drivertree.ModeTree, nil
	d.Host = s
	return cfg, d, s, ev
}

func TestTreeBootLoadsTheInstalledVersionNotTheDesired(t *testing.T) {
	cfg, d, s, ev := treeSetup(t, "25.3.0", true)
	plan, err := Prepare(context.Background(), cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if s.loads != 1 || len(s.copies) != 0 {
		t.Fatalf("loads %d, copies %v: want the installed tree loaded, nothing copied", s.loads, s.copies)
	}
	if plan.Loaded != "25.3.0" || !plan.Pending || !plan.NeedsInstall() {
		t.Fatalf("plan %+v: want 25.3.0 loaded and 25.5.0 pending for the rollout", plan)
	}
	if label(t, d) != "25.3.0" || !strings.HasPrefix(ev.got[0], "DriverLoaded: driver 25.3.0 loaded from the tree") {
		t.Fatalf("label %q events %v", label(t, d), ev.got)
	}
}

func TestTreeFreshHostCopiesAndLoads(t *testing.T) {
	cfg, d, s, _ := treeSetup(t, "", false)
	plan, err := Prepare(context.Background(), cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.copies, " ") != "25.5.0" || s.loads != 1 || !plan.Install || label(t, d) != "25.5.0" {
		t.Fatalf("copies %v loads %d plan %+v label %q", s.copies, s.loads, plan, label(t, d))
	}
}

func TestTreeNotWholeIsReplacedByTheDesired(t *testing.T) {
	cfg, d, s, ev := treeSetup(t, "25.3.0", false)
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.copies, " ") != "25.5.0" || s.loads != 1 || label(t, d) != "25.5.0" {
		t.Fatalf("copies %v loads %d label %q", s.copies, s.loads, label(t, d))
	}
	if !strings.HasPrefix(ev.got[0], "DriverInstallRepair") {
		t.Fatalf("events %v", ev.got)
	}
}

func TestTreeModeNeedsNoInstallCommand(t *testing.T) {
	cfg, _, _, _ := treeSetup(t, "", false)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Mode = "rpm"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "installMode") {
		t.Fatalf("unknown mode: %v", err)
	}
}
