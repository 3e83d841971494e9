package driverentry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube/kubetest"
	"github.com/openfuyao/npu-stack/internal/marker"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		loaded, desired string
		want            Plan
	}{
		{"", "25.5.0", Plan{Install: true, Desired: "25.5.0", Loaded: "25.5.0"}},
		{"25.5.0", "25.5.0", Plan{Desired: "25.5.0", Loaded: "25.5.0"}},
		{"25.3.0", "25.5.0", Plan{Desired: "25.5.0", Loaded: "25.3.0", Pending: true}},
		{"25.5.0", "25.3.0", Plan{Desired: "25.3.0", Loaded: "25.5.0", Pending: true}}, // rollback waits for a reboot too
	} {
		if got := Decide(tc.loaded, tc.desired); got != tc.want {
			t.Errorf("Decide(%q, %q) = %+v, want %+v", tc.loaded, tc.desired, got, tc.want)
		}
	}
}

type events struct{ got []string }

func (e *events) Node(_ *corev1.Node, _ bool, reason contract.EventReason, format string, args ...any) {
	e.got = append(e.got, string(reason)+": "+fmt.Sprintf(format, args...))
}

type failingInstall struct{ *simhost.Host }

func (failingInstall) InstallDriver(context.Context, string, []string) error {
	return errors.New("install.sh exited with code 3")
}

func setup(t *testing.T, loaded string) (Config, Deps, *simhost.Host, *events) {
	t.Helper()
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 8, Driver: loaded})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := contract.NewKeys(contract.DefaultDomain)
	ev := &events{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg := Config{
		NodeName: "n1", Keys: keys, DriverVersion: "25.5.0", DriverRoot: h.Path("/usr/local/Ascend/driver"),
		Markers: marker.Dir{Path: h.Path("/run/npu-stack")}, InstallCommand: []string{"/install.sh", "--full"},
	}
	d := Deps{Nodes: kubetest.NewNodes(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}), Host: h, Events: ev, Log: log}
	return cfg, d, h, ev
}

func label(t *testing.T, d Deps) string {
	t.Helper()
	n, err := d.Nodes.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels["npu.openfuyao.com/driver-version"]
}

func TestPrepareFreshBootInstalls(t *testing.T) {
	cfg, d, h, ev := setup(t, "")
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	st, _ := h.State()
	if st.Installs != 1 || st.LoadedDriver != "25.5.0" || strings.Join(st.LastInstallCommand, " ") != "/install.sh --full" {
		t.Fatalf("host after install: %+v", st)
	}
	if v, ok, _ := cfg.Markers.Ready(); !ok || v != "25.5.0" {
		t.Fatalf("marker %q %v", v, ok)
	}
	if n, ok, _ := cfg.Markers.ChipsAtLoad(); !ok || n != 8 {
		t.Fatalf("chips at load %d %v", n, ok)
	}
	if got := label(t, d); got != "25.5.0" {
		t.Fatalf("label %q", got)
	}
	if len(ev.got) != 1 || !strings.HasPrefix(ev.got[0], "DriverLoaded") {
		t.Fatalf("events %v", ev.got)
	}
}

func TestPrepareSameVersionRecordsOnly(t *testing.T) {
	cfg, d, h, _ := setup(t, "25.5.0")
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.State(); st.Installs != 0 {
		t.Fatal("installed over a loaded driver")
	}
	if v, ok, _ := cfg.Markers.Ready(); !ok || v != "25.5.0" || label(t, d) != "25.5.0" {
		t.Fatalf("marker %q %v label %q", v, ok, label(t, d))
	}
}

func TestPrepareOtherVersionIdlesOnTheLoadedOne(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.3.0")
	plan, err := Prepare(context.Background(), cfg, d)
	if err != nil || !plan.Pending {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	if st, _ := h.State(); st.Installs != 0 || st.LoadedDriver != "25.3.0" {
		t.Fatalf("touched the running driver: %+v", st)
	}
	if v, ok, _ := cfg.Markers.Ready(); !ok || v != "25.3.0" || label(t, d) != "25.3.0" {
		t.Fatalf("marker %q %v label %q; want the loaded 25.3.0", v, ok, label(t, d))
	}
	if len(ev.got) != 1 || !strings.Contains(ev.got[0], "25.5.0 is activated by the next reboot") {
		t.Fatalf("events %v", ev.got)
	}
}

func TestPrepareInstallFailureNamesNodeAndVersion(t *testing.T) {
	cfg, d, h, ev := setup(t, "")
	d.Host = failingInstall{h}
	_, err := Prepare(context.Background(), cfg, d)
	if err == nil || !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "driver 25.5.0") || !strings.Contains(err.Error(), "code 3") {
		t.Fatalf("error %v", err)
	}
	if _, ok, _ := cfg.Markers.Ready(); ok {
		t.Fatal("marker written after a failed install")
	}
	if len(ev.got) != 1 || !strings.HasPrefix(ev.got[0], "DriverInstallFailed") {
		t.Fatalf("events %v", ev.got)
	}
}

func TestPrepareLeavesAWedgedBootsMarkerToTheWatch(t *testing.T) {
	cfg, d, _, _ := setup(t, "25.5.0")
	_ = cfg.Markers.RecordWedge("chip 1 Critical")
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := cfg.Markers.Ready(); ok {
		t.Fatal("driver entry re-advertised wedged chips")
	}
}

func TestValidate(t *testing.T) {
	cfg, _, _, _ := setup(t, "")
	for _, bad := range []func(*Config){
		func(c *Config) { c.NodeName = "" },
		func(c *Config) { c.DriverVersion = "" },
		func(c *Config) { c.InstallCommand = nil },
	} {
		c := cfg
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}
