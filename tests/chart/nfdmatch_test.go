package chart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// NFD's rule matching (kubernetes-sigs/node-feature-discovery v0.19.0,
// docs/usage/customization-guide.md, "matchFeatures"): a rule applies when
// every matchFeatures term matches; a term on an instance feature
// (pci.device) matches when one instance satisfies all its expressions, a
// term on an attribute feature (kernel.version, system.osrelease) when
// the attributes do. NFD's Go module is not served by the module proxy
// here (proxy.golang.org answers 403 for sigs.k8s.io/node-feature-
// discovery), so the two operators the chart's rule uses, In and
// InRegexp, are evaluated below as that page defines them; any other
// operator fails the test.

// hostFacts are what NFD's sources read on a node: source/pci
// (/sys/bus/pci/devices/*/{vendor,device}, lower-case hex without 0x),
// source/kernel (/proc/sys/kernel/osrelease, whole, as kernel.version
// full and the label kernel-version.full), source/system (/etc/os-release).
type hostFacts struct {
	pci       []map[string]string
	kernel    string
	osRelease map[string]string
}

// simulatedHost writes a host root with the files NFD reads, then reads
// them back as NFD's sources do, so the facts go through the same paths.
func simulatedHost(t *testing.T, pci [][2]string, kernel, osRelease string) hostFacts {
	t.Helper()
	root := t.TempDir()
	write := func(p, content string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, d := range pci {
		dev := filepath.Join("sys/bus/pci/devices", fmt.Sprintf("0000:%02x:00.0", i+1))
		write(filepath.Join(dev, "vendor"), "0x"+d[0]+"\n")
		write(filepath.Join(dev, "device"), "0x"+d[1]+"\n")
	}
	write("proc/sys/kernel/osrelease", kernel+"\n")
	write("etc/os-release", osRelease)

	f := hostFacts{osRelease: map[string]string{}}
	devs, _ := filepath.Glob(filepath.Join(root, "sys/bus/pci/devices/*"))
	for _, d := range devs {
		inst := map[string]string{}
		for _, a := range []string{"vendor", "device"} {
			b, err := os.ReadFile(filepath.Join(d, a))
			if err != nil {
				t.Fatal(err)
			}
			inst[a] = strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")
		}
		f.pci = append(f.pci, inst)
	}
	b, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/osrelease"))
	if err != nil {
		t.Fatal(err)
	}
	f.kernel = strings.TrimSpace(string(b))
	b, err = os.ReadFile(filepath.Join(root, "etc/os-release"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.HasPrefix(k, "#") {
			f.osRelease[k] = strings.Trim(v, `"'`)
		}
	}
	return f
}

func matchExpr(t *testing.T, attrs map[string]string, exprs map[string]any) bool {
	t.Helper()
	for name, e := range exprs {
		em := e.(map[string]any)
		val, ok := attrs[name]
		var want []string
		for _, v := range em["value"].([]any) {
			want = append(want, v.(string))
		}
		switch em["op"] {
		case "In":
			if !ok || !slices.Contains(want, val) {
				return false
			}
		case "InRegexp":
			hit := false
			for _, re := range want {
				hit = hit || (ok && regexp.MustCompile(re).MatchString(val))
			}
			if !hit {
				return false
			}
		default:
			t.Fatalf("operator %v: not evaluated by this test", em["op"])
		}
	}
	return true
}

// nfdLabels are the labels NFD puts on a node with facts f under rules:
// its own kernel-version.full plus every applying rule's labels.
func nfdLabels(t *testing.T, rules []any, f hostFacts) map[string]string {
	t.Helper()
	out := map[string]string{"feature.node.kubernetes.io/kernel-version.full": f.kernel}
	for _, r := range rules {
		rm := r.(map[string]any)
		applies := true
		for _, mf := range rm["matchFeatures"].([]any) {
			m := mf.(map[string]any)
			exprs := m["matchExpressions"].(map[string]any)
			switch m["feature"] {
			case "pci.device":
				any := false
				for _, inst := range f.pci {
					any = any || matchExpr(t, inst, exprs)
				}
				applies = applies && any
			case "kernel.version":
				applies = applies && matchExpr(t, map[string]string{"full": f.kernel}, exprs)
			case "system.osrelease":
				applies = applies && matchExpr(t, f.osRelease, exprs)
			default:
				t.Fatalf("feature %v: not evaluated by this test", m["feature"])
			}
		}
		if applies {
			for k, v := range rm["labels"].(map[string]any) {
				out[k] = v.(string)
			}
		}
	}
	return out
}

const (
	ubuntu2204 = "NAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nID=ubuntu\n"
	oe2403     = "NAME=\"openEuler\"\nVERSION=\"24.03 (LTS-SP3)\"\nID=\"openEuler\"\nVERSION_ID=\"24.03\"\n"
	oe2203     = "NAME=\"openEuler\"\nVERSION=\"22.03 (LTS-SP3)\"\nID=\"openEuler\"\nVERSION_ID=\"22.03\"\n"
)

// TestNodeFeatureRuleLabelsSimulatedHosts evaluates the chart's rule, with
// docs/examples/values-fleet.yaml, against simulated hosts: each NPU host
// gets npuNodeSelector's labels and its chip and OS; a host without a
// Huawei NPU (an NVIDIA GPU, a Huawei NIC) gets none. With the control
// plane, a node carrying a host's labels is the one the driver
// DaemonSet's and the device plugin's node selectors find.
func TestNodeFeatureRuleLabelsSimulatedHosts(t *testing.T) {
	vals := fleetValues(t)
	r := mustRender(t, variant{name: "fleet", vals: vals})
	rules := nested[[]any](t, r.find("NodeFeatureRule", "npu-stack-npu"), "spec", "rules")
	cases := []struct {
		name      string
		facts     hostFacts
		chip, os  string
		npu       bool
		profileDS string
	}{
		{name: "910B openEuler 22.03 SP3", facts: simulatedHost(t, [][2]string{{"19e5", "1822"}, {"19e5", "d802"}, {"19e5", "d802"}}, "5.10.0-182.0.0.95.oe2203sp3.aarch64", oe2203),
			chip: "910b", os: "oe2203sp3", npu: true, profileDS: "npu-stack-driver-910b-oe2203sp3-arm"},
		{name: "310P Ubuntu 22.04", facts: simulatedHost(t, [][2]string{{"19e5", "d500"}}, "5.15.0-105-generic", ubuntu2204),
			chip: "310p", os: "ubuntu22.04", npu: true, profileDS: "npu-stack-driver-310p-ubuntu2204"},
		{name: "A3 openEuler 24.03 SP1", facts: simulatedHost(t, [][2]string{{"19e5", "d803"}}, "6.6.0-89.0.0.94.oe2403sp1.aarch64", oe2403),
			chip: "a3", os: "oe2403sp1", npu: true, profileDS: "npu-stack-driver-a3-oe2403sp1-arm"},
		{name: "GPU node", facts: simulatedHost(t, [][2]string{{"10de", "2330"}}, "5.15.0-105-generic", ubuntu2204)},
		{name: "Huawei NIC only", facts: simulatedHost(t, [][2]string{{"19e5", "1822"}}, "6.6.0-145.0.4.135.oe2403sp3.aarch64", oe2403)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := nfdLabels(t, rules, tc.facts)
			if !tc.npu {
				if len(got) != 1 {
					t.Errorf("a host without an NPU got %v", got)
				}
				return
			}
			if got["openfuyao.com/npu.present"] != "true" || got["openfuyao.com/npu.chip"] != tc.chip || got["openfuyao.com/npu.os"] != tc.os {
				t.Fatalf("labels %v, want present, chip %s, os %s", got, tc.chip, tc.os)
			}
			ds := r.find("DaemonSet", tc.profileDS)
			if ds == nil {
				t.Fatalf("no DaemonSet %s", tc.profileDS)
			}
			sel := nested[map[string]any](t, ds, "spec", "template", "spec", "nodeSelector")
			for k, v := range sel {
				if got[k] != v {
					t.Errorf("%s selects %s=%v; the host has %q", tc.profileDS, k, v, got[k])
				}
			}
			if env == nil {
				return
			}
			// On the API server: a node with these labels is what the
			// DaemonSet's selector lists.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			names, err := env.AddNodes(ctx, 1, "nfd", got)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for k, v := range sel {
				m[k] = v.(string)
			}
			list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(m).String()})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, n := range list.Items {
				found = found || n.Name == names[0]
			}
			if !found {
				t.Errorf("node %s labelled %v is not among the nodes %s selects (%v)", names[0], got, tc.profileDS, m)
			}
		})
	}
}

// fleetValues are docs/examples/values-fleet.yaml.
func fleetValues(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "values-fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	return vals
}

// supportTable is a table of docs/installation.md: the rows after the
// header line that starts with header, each split into trimmed cells.
func supportTable(t *testing.T, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "installation.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+header)
	if !ok {
		t.Fatalf("docs/installation.md has no table %q", header)
	}
	var rows [][]string
	for i, l := range strings.Split(after, "\n") {
		if i < 2 { // the rest of the header line, then |---|
			continue
		}
		if !strings.HasPrefix(l, "|") {
			break
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(l, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("docs/installation.md table %q has no rows", header)
	}
	return rows
}

var (
	backticked    = regexp.MustCompile("^`([^`]+)`$")
	exampleKernel = regexp.MustCompile("e\\.g\\. `([^`]+)`")
	osReleaseID   = regexp.MustCompile("`ID=([^`]+)`, `VERSION_ID=\"([^\"]+)\"`")
	pciID         = regexp.MustCompile("`19e5:([0-9a-f]{4})`")
	openEulerName = regexp.MustCompile(`^openEuler (\d\d\.\d\d) LTS`)
)

// TestNodeFeatureRuleAndSupportTableAgree: the chart's default rule
// labels exactly the OSes of docs/installation.md's OS table, each as the
// table says, from what NFD reads on such a host (the table's example
// kernel release, or its os-release keys), service-pack-less openEuler
// releases (…oe2403.x86_64) included; and it labels every chip of the
// "Supported platforms" table by its PCI device ID.
func TestNodeFeatureRuleAndSupportTableAgree(t *testing.T) {
	r := mustRender(t, variant{name: "nfd", vals: map[string]any{"nodeFeatureRule": map[string]any{"enabled": true}}})
	rules := nested[[]any](t, r.find("NodeFeatureRule", "npu-stack-npu"), "spec", "rules")
	ruleOSes := map[string]bool{}
	for _, o := range asList(loadChart(t).Values["nodeFeatureRule"].(map[string]any)["oses"]) {
		ruleOSes[o.(map[string]any)["os"].(string)] = true
	}
	tableOSes := map[string]bool{}
	for _, row := range supportTable(t, "| OS | what the rule reads (example) | OS label |") {
		name, reads := row[0], row[1]
		m := backticked.FindStringSubmatch(row[2])
		if m == nil {
			continue // KubeOS: labelled as the openEuler release it was built from
		}
		label := m[1]
		tableOSes[label] = true
		kernel, osRelease := "5.15.0-105-generic", ""
		if id := osReleaseID.FindStringSubmatch(reads); id != nil {
			osRelease = fmt.Sprintf("NAME=%q\nID=%s\nVERSION_ID=%q\n", name, id[1], id[2])
		} else if k := exampleKernel.FindStringSubmatch(reads); k != nil {
			v := openEulerName.FindStringSubmatch(name)
			if v == nil {
				t.Fatalf("OS table row %q: a kernel release for an OS that is not openEuler", name)
			}
			kernel, osRelease = k[1], fmt.Sprintf("NAME=\"openEuler\"\nID=\"openEuler\"\nVERSION_ID=%q\n", v[1])
		} else {
			t.Fatalf("OS table row %q: neither os-release keys nor an example kernel release in %q", name, reads)
		}
		got := nfdLabels(t, rules, simulatedHost(t, [][2]string{{"19e5", "d802"}}, kernel, osRelease))
		if got["openfuyao.com/npu.os"] != label {
			t.Errorf("%s (kernel %s): the rule labels OS %q, the table says %q", name, kernel, got["openfuyao.com/npu.os"], label)
		}
	}
	for label := range tableOSes {
		if !ruleOSes[label] {
			t.Errorf("docs/installation.md lists OS %s, which nodeFeatureRule.oses does not label", label)
		}
	}
	for label := range ruleOSes {
		if !tableOSes[label] {
			t.Errorf("nodeFeatureRule.oses labels OS %s, which docs/installation.md's OS table does not list", label)
		}
	}

	var chipsRow []string
	for _, row := range supportTable(t, "| | supported | notes |") {
		if row[0] == "chips" {
			chipsRow = row
		}
	}
	devices := pciID.FindAllStringSubmatch(strings.Join(chipsRow, " "), -1)
	if len(devices) == 0 {
		t.Fatal(`docs/installation.md "Supported platforms" names no chip PCI ID (19e5:xxxx)`)
	}
	for _, d := range devices {
		got := nfdLabels(t, rules, simulatedHost(t, [][2]string{{"19e5", d[1]}}, "5.15.0-105-generic", ubuntu2204))
		if got["openfuyao.com/npu.present"] != "true" || got["openfuyao.com/npu.chip"] == "" {
			t.Errorf("a host with the supported chip 19e5:%s gets labels %v from the rule, want present and its chip", d[1], got)
		}
	}
}
