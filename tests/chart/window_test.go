package chart_test

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	_ "time/tzdata" // the zone database the binaries embed

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openfuyao/npu-stack/internal/window"
)

func windowValues(upgrade, recovery []any) map[string]any {
	return map[string]any{
		"driver":         map[string]any{"upgradePolicy": map[string]any{"autoUpgrade": true, "maintenanceWindows": upgrade, "settleSeconds": 120}},
		"recoveryPolicy": map[string]any{"autoRecover": true, "maintenanceWindows": recovery},
	}
}

func win(days []any, start, end, zone string, inFlight ...string) map[string]any {
	w := map[string]any{"days": days, "start": start, "end": end, "timeZone": zone}
	if len(inFlight) > 0 {
		w["inFlight"] = inFlight[0]
	}
	return w
}

func containerArgs(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	for _, c := range containers(t, o, "containers") {
		return strs(c["args"])
	}
	t.Fatalf("%s %s has no container", o.GetKind(), o.GetName())
	return nil
}

// The windows reach every rollout (policy ConfigMap, hook Job, resume
// CronJob) and the rebooters, in the form the binaries parse.
func TestWindowsReachTheBinaries(t *testing.T) {
	vals := windowValues(
		[]any{win([]any{"sat", "sun"}, "22:00", "04:00", "Europe/Berlin", "wait"), win([]any{"wed"}, "01:00:30", "03:00", "UTC")},
		[]any{win([]any{"mon", "tue", "wed", "thu", "fri"}, "20:00", "24:00", "Asia/Shanghai")})
	r, err := render(t, vals, renderOpts{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sat,sun 22:00-04:00 Europe/Berlin wait", "wed 01:00:30-03:00 UTC"}
	cm := r.find("ConfigMap", "npu-stack-rollout-policy")
	args := strings.Split(nested[string](t, cm, "data", "args"), "\n")
	for _, line := range []string{"--settle=120s", "--maintenance-window=" + want[0], "--maintenance-window=" + want[1]} {
		if !slices.Contains(args, line) {
			t.Errorf("policy ConfigMap lacks %q: %q", line, args)
		}
	}
	for _, o := range []*unstructured.Unstructured{r.find("Job", "npu-stack-rollout")} {
		if got := flagValues(containerArgs(t, o), "maintenance-window"); !slices.Equal(got, want) {
			t.Errorf("%s: windows %q, want %q", o.GetName(), got, want)
		}
	}
	cron := r.find("CronJob", "npu-stack-rollout-resume")
	spec := nested[map[string]any](t, cron, "spec", "jobTemplate", "spec", "template", "spec")
	cronArgs := strs(spec["containers"].([]any)[0].(map[string]any)["args"])
	if got := flagValues(cronArgs, "maintenance-window"); !slices.Equal(got, want) {
		t.Errorf("resume CronJob: windows %q, want %q", got, want)
	}
	rb := flagValues(containerArgs(t, r.find("DaemonSet", "npu-stack-rebooter")), "recovery-window")
	if !slices.Equal(rb, []string{"mon,tue,wed,thu,fri 20:00-24:00 Asia/Shanghai"}) {
		t.Errorf("rebooter: recovery windows %q", rb)
	}
	// What the chart writes, the binaries read.
	for _, spec := range append(append([]string{}, want...), rb...) {
		if _, err := window.Parse(spec); err != nil {
			t.Errorf("the binaries refuse the chart's window: %v", err)
		}
	}
	// No windows: nothing rendered, any time as before.
	r, err = render(t, nil, renderOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if got := flagValues(containerArgs(t, r.find("DaemonSet", "npu-stack-rebooter")), "recovery-window"); len(got) != 0 {
		t.Errorf("default rebooter has windows %q", got)
	}
	if got := nested[string](t, r.find("ConfigMap", "npu-stack-rollout-policy"), "data", "args"); strings.Contains(got, "maintenance-window") {
		t.Errorf("default policy has windows: %s", got)
	}
}

// What the schema cannot refuse (a start equal to its end, a zone the
// tz database does not know) the chart refuses, naming the field.
func TestWindowRefusalsNameTheField(t *testing.T) {
	sat := []any{"sat"}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string // "" = accepted
	}{
		{name: "start equals end", vals: windowValues([]any{win(sat, "22:00", "22:00:00", "UTC")}, nil),
			want: "driver.upgradePolicy.maintenanceWindows[0]: start and end are both 22:00: a window needs a length"},
		{name: "unknown zone", vals: windowValues([]any{win(sat, "22:00", "04:00", "UTC"), win(sat, "01:00", "02:00", "Europe/Berln")}, nil),
			want: `driver.upgradePolicy.maintenanceWindows[1].timeZone: "Europe/Berln" is not an IANA time zone name`},
		{name: "recovery zone", vals: windowValues(nil, []any{win(sat, "22:00", "04:00", "Mars/Olympus_Mons")}),
			want: `recoveryPolicy.maintenanceWindows[0].timeZone: "Mars/Olympus_Mons" is not an IANA time zone name`},
		{name: "recovery start equals end", vals: windowValues(nil, []any{win(sat, "00:00", "00:00", "UTC")}),
			want: `recoveryPolicy.maintenanceWindows[0]: start and end are both 00:00`},
		{name: "Local is no zone", vals: windowValues([]any{win(sat, "22:00", "04:00", "Local")}, nil),
			want: `driver.upgradePolicy.maintenanceWindows[0].timeZone: "Local"`},
		{name: "whole day", vals: windowValues([]any{win(sat, "00:00", "24:00", "UTC")}, nil)},
		{name: "crossing midnight, deep zone name", vals: windowValues([]any{win(sat, "23:30", "00:30", "America/Argentina/Buenos_Aires", "wait")}, nil)},
		{name: "seconds", vals: windowValues(nil, []any{win(sat, "10:00:05", "10:00:50", "Etc/GMT-14")})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.vals, renderOpts{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused, want accepted: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("rendered; want it refused: %s", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("the refusal must say %q:\n%v", tc.want, err)
			}
		})
	}
}

// The chart's zone list is the one the binaries embed (time/tzdata is
// Go's lib/time/zoneinfo.zip): a zone the chart accepts loads in the
// rebooter and the rollout, and none they know is refused.
func TestChartZonesAreTheBinariesZones(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "npu-stack", "files", "time-zones.txt"))
	if err != nil {
		t.Fatal(err)
	}
	chart := strings.Fields(string(data))
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	zf, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(out)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zf.Close() }()
	var goZones []string
	for _, f := range zf.File {
		if !strings.HasSuffix(f.Name, "/") {
			goZones = append(goZones, f.Name)
		}
	}
	slices.Sort(goZones)
	if !slices.Equal(chart, goZones) {
		t.Fatalf("charts/npu-stack/files/time-zones.txt (%d zones) differs from the Go toolchain's tz database (%d zones); regenerate it: "+
			`unzip -Z1 "$(go env GOROOT)/lib/time/zoneinfo.zip" | grep -v '/$' | sort > charts/npu-stack/files/time-zones.txt`, len(chart), len(goZones))
	}
	for _, z := range chart {
		if _, err := window.LoadZone(z); err != nil {
			t.Errorf("zone %s: %v", z, err)
		}
	}
}
