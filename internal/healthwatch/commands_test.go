package healthwatch

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/openfuyao/npu-stack/internal/health"
	"github.com/openfuyao/npu-stack/internal/host/agenthost"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/marker"
)

// run runs the command on the simulated host simHost made for this test
// (handed in: a unit test is not built with the tag simhost), else on the
// real one.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	s := &shared{}
	if dir := os.Getenv(agenthost.EnvVar); dir != "" {
		s.sim = simhost.Open(dir)
	}
	root := newRoot(s)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--log-level=error"))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func simHost(t *testing.T, driver string) *simhost.Host {
	t.Helper()
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "310p", ChipCount: 4, Driver: driver})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(agenthost.EnvVar, h.Dir)
	return h
}

func TestInstallBinary(t *testing.T) {
	h := simHost(t, "")
	if _, err := run(t, "install-binary", "--to=/opt/npu-stack/bin"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(h.Path("/opt/npu-stack/bin"), Name))
	if err != nil || st.Mode().Perm() != 0o755 || st.Size() == 0 {
		t.Fatalf("installed binary: %v, %v", st, err)
	}
	if _, err := run(t, "install-binary"); err == nil {
		t.Fatal("missing --to accepted")
	}
}

func TestCDIGenerate(t *testing.T) {
	h := simHost(t, "25.3.0")
	if _, err := run(t, "cdi", "generate", "--kind=huawei.com/npu", "--driver-root=/usr/local/Ascend/driver", "--output=/var/run/cdi/huawei-com-npu.yaml"); err != nil {
		t.Fatal(err)
	}
	spec, err := cdiapi.ReadSpec(h.Path("/var/run/cdi/huawei-com-npu.yaml"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	// 4 chips, all of them, and the driver's user space alone (driver).
	if want := []string{"0", "1", "2", "3", "all", "driver"}; !slices.Equal(names, want) {
		t.Fatalf("devices %v, want %v", names, want)
	}
}

func TestValidateCommand(t *testing.T) {
	h := simHost(t, "25.3.0")
	_, err := run(t, "validate", "--marker-only", "--marker-dir=/run/npu-stack")
	if err == nil || !strings.Contains(err.Error(), "driver-ready marker /run/npu-stack/driver-ready is missing") {
		t.Fatalf("marker-only without marker: %v", err)
	}
	if err := (marker.Dir{Path: h.Path("/run/npu-stack")}).SetReady("25.3.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "validate", "--marker-only", "--marker-dir=/run/npu-stack"); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "validate", "--node-name=n1", "--driver-root=/usr/local/Ascend/driver", "--marker-dir=/run/npu-stack", "--driver-version=25.5.0")
	if err == nil || !strings.Contains(err.Error(), "node n1: driver 25.3.0 is loaded, want 25.5.0") {
		t.Fatalf("version mismatch: %v", err)
	}
	if _, err := run(t, "validate", "--wait", "--timeout=1m", "--node-name=n1", "--driver-root=/usr/local/Ascend/driver", "--marker-dir=/run/npu-stack", "--driver-version=25.3.0"); err != nil {
		t.Fatal(err)
	}
}

func TestDriverEntryRefusesArgumentsBeforeDash(t *testing.T) {
	simHost(t, "")
	_, err := run(t, "driver-entry", "--node-name=n1", "--driver-version=1", "stray", "--", "/install.sh")
	if err == nil || !strings.Contains(err.Error(), "before --") {
		t.Fatalf("error %v", err)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	health.NewMetrics(reg)
	log := logrus.New()
	log.SetOutput(io.Discard)
	addr, stop, err := serveMetrics(context.Background(), "127.0.0.1:0", reg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "npu_healthwatch_consecutive_probe_failures") {
		t.Fatalf("metrics body:\n%s", body)
	}
	if _, _, err := serveMetrics(context.Background(), addr, reg, log); err == nil {
		t.Fatal("second server on a taken port started")
	}
}

func TestDevicePluginSelectorFlag(t *testing.T) {
	for _, tc := range []struct {
		selector, namespace, err string
	}{
		{selector: "app.kubernetes.io/component=device-plugin,app.kubernetes.io/instance=npu-stack", namespace: "npu-operator"},
		{selector: "app.kubernetes.io/component=device-plugin", err: "env POD_NAMESPACE"},
		{selector: "a b c", namespace: "npu-operator", err: `--device-plugin-selector "a b c"`},
		{selector: " ", namespace: "npu-operator", err: "selects every pod"},
	} {
		p, err := devicePlugin(tc.selector, tc.namespace)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.selector, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q in %q: error %v, want one containing %q", tc.selector, tc.namespace, err, tc.err)
		case tc.err == "" && (p.Namespace != tc.namespace || p.Selector.String() != tc.selector):
			t.Errorf("%q: got %+v", tc.selector, p)
		}
	}
}
