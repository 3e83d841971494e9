package preflight

import (
	"archive/tar"
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/imagefs"
)

const (
	run  = "/usr/local/Ascend/driver.run"
	tree = "/usr/local/Ascend/driver"
)

func found(p string) imagefs.Answer {
	return imagefs.Answer{Probe: imagefs.Probe{Path: p}, Found: true, Type: tar.TypeReg}
}

func missing(p, why string) imagefs.Answer {
	return imagefs.Answer{Probe: imagefs.Probe{Path: p}, Why: why}
}

func versionFile(body string) imagefs.Answer {
	a := found(tree + "/version.info")
	a.Read, a.Data = versionInfoLimit, []byte(body)
	return a
}

func modules() imagefs.Answer {
	return imagefs.Answer{Probe: imagefs.Probe{Path: tree + "/host/", Match: "*.ko"}, Found: true, Type: tar.TypeDir, Child: tree + "/host/drv_pcie_host.ko"}
}

func TestNeedProbes(t *testing.T) {
	p, err := Need{Installer: run}.Probes()
	if err != nil || len(p) != 1 || p[0].Path != run || p[0].Read != 0 {
		t.Fatalf("run mode probes %+v (%v), want the installer alone", p, err)
	}
	p, err = Need{Mode: "tree"}.Probes()
	if err != nil || len(p) != 4 {
		t.Fatalf("tree mode probes %+v (%v)", p, err)
	}
	want := map[string]imagefs.Probe{
		tree + "/version.info":             {Path: tree + "/version.info", Read: versionInfoLimit},
		tree + "/script/specific_func.inc": {Path: tree + "/script/specific_func.inc"},
		tree + "/tools/npu-smi":            {Path: tree + "/tools/npu-smi"},
		tree + "/host/":                    {Path: tree + "/host/", Match: "*.ko"},
	}
	for _, pr := range p {
		if want[pr.Path] != pr {
			t.Errorf("probe %+v, want %+v", pr, want[pr.Path])
		}
	}
	if _, err := (Need{}).Probes(); err == nil {
		t.Error("run mode without an installer must be refused")
	}
}

func TestNeedJudge(t *testing.T) {
	runNeed := Need{Installer: run, Version: "25.5.0"}
	treeNeed := Need{Mode: "tree", Tree: tree, Version: "25.5.0"}
	goodTree := []imagefs.Answer{versionFile("Version=25.5.0\nascendhal_version=7.35.23\n"), found(tree + "/script/specific_func.inc"), found(tree + "/tools/npu-smi"), modules()}
	with := func(i int, a imagefs.Answer) []imagefs.Answer {
		out := append([]imagefs.Answer{}, goodTree...)
		out[i] = a
		return out
	}
	dir := found(run)
	dir.Type = tar.TypeDir
	linked := found(run)
	linked.Resolved = "/opt/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run"
	for name, tc := range map[string]struct {
		need Need
		ans  []imagefs.Answer
		want []string // nil: no problem
	}{
		"run: installer present":         {runNeed, []imagefs.Answer{found(run)}, nil},
		"run: installer through link":    {runNeed, []imagefs.Answer{linked}, nil},
		"tree: everything, same version": {treeNeed, goodTree, nil},
		"run: installer missing": {runNeed, []imagefs.Answer{missing(run, "/usr/local/Ascend/driver.run is not in the image")},
			[]string{"driver image reg/drv:a (linux/arm64) lacks /usr/local/Ascend/driver.run", `install mode "run"`, "is not in the image", "set driver.installCommand to the vendor package's path in the image", "docs/installation.md"}},
		"run: installer is a directory": {runNeed, []imagefs.Answer{dir}, []string{"/usr/local/Ascend/driver.run, but it is a directory, not a file", "driver.installCommand"}},
		"tree: npu-smi missing": {treeNeed, with(2, missing(tree+"/tools/npu-smi", "/usr/local/Ascend/driver/tools/npu-smi is not in the image")),
			[]string{"lacks /usr/local/Ascend/driver/tools/npu-smi", `install mode "tree"`, "driver.imageTreePath (/usr/local/Ascend/driver)"}},
		"tree: no module": {treeNeed, with(3, imagefs.Answer{Probe: imagefs.Probe{Path: tree + "/host/", Match: "*.ko"}, Why: "/usr/local/Ascend/driver/host holds no file matching *.ko"}),
			[]string{"lacks /usr/local/Ascend/driver/host/*.ko", "holds no file matching *.ko"}},
		"tree: another version": {treeNeed, with(0, versionFile("Version=25.3.0\n")),
			[]string{"holds driver 25.3.0", "/usr/local/Ascend/driver/version.info: Version=25.3.0", "not driver.version 25.5.0", "set driver.version to 25.3.0"}},
		"tree: version in another case": {treeNeed, with(0, versionFile("Version=25.5.RC1\n")), []string{"holds driver 25.5.RC1"}},
		"tree: not a version file":      {treeNeed, with(0, versionFile("garbage\n")), []string{"not a driver version file", "no Version=<version> line"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := tc.need.Judge("reg/drv:a", "linux/arm64", tc.ans)
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("refused: %q", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one problem, got %q", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("%q lacks %q", got[0], w)
				}
			}
		})
	}
}

func TestPackageVersion(t *testing.T) {
	for file, want := range map[string]string{
		"/opt/Ascend-hdk-910b-npu-driver_25.0.rc1.1_linux-aarch64.run": "25.0.rc1.1", // released (docs/host-contract.md section 1)
		"Ascend-hdk-910b-driver_8.5.t7.0.b053_linux-x86_64.run":        "8.5.t7.0.b053",
		"Ascend-hdk-A3-driver_25.5.0_openeuler22.03-aarch64.run":       "25.5.0",
		"/usr/local/Ascend/driver.run":                                 "",
		"Ascend-hdk-910b-npu-firmware_7.7.0.1.231.run":                 "",
	} {
		v, ok := PackageVersion(file)
		if v != want || ok != (want != "") {
			t.Errorf("PackageVersion(%s) = %q, %v; want %q", file, v, ok, want)
		}
	}
	n := Need{Installer: run, Version: "25.5.0"}
	a := found(run)
	a.Resolved = "/opt/Ascend-hdk-910b-npu-driver_25.3.0_linux-aarch64.run"
	if w := n.NameWarning("reg/drv:a", "linux/amd64", []imagefs.Answer{a}); !strings.Contains(w, "version 25.3.0") || !strings.Contains(w, "driver.version is 25.5.0") {
		t.Errorf("warning %q", w)
	}
	a.Resolved = "/opt/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run"
	if w := n.NameWarning("reg/drv:a", "linux/amd64", []imagefs.Answer{a}); w != "" {
		t.Errorf("same version warned: %q", w)
	}
}

// contents is a ContentChecker answering from a table: image → platform → answers.
type contents map[string]map[string][]imagefs.Answer

func (c contents) Contents(_ context.Context, image string, archs []string, _ []imagefs.Probe) (map[string][]imagefs.Answer, error) {
	m, ok := c[image]
	if !ok {
		return nil, fmt.Errorf("%w: the layers of %s were not read within 1s", ErrContentTimeout, image)
	}
	out := map[string][]imagefs.Answer{}
	for _, a := range archs {
		out["linux/"+a] = m["linux/"+a]
	}
	return out, nil
}

func TestRunChecksContents(t *testing.T) {
	arm := node("n1", "910b", "1.0", false, true)
	arm.Labels[corev1.LabelArchStable] = "arm64"
	in := input(arm, node("n2", "310p", "1.0", false, true))
	in.Nodes[1].Labels[corev1.LabelArchStable] = "amd64"
	in.DriverInstaller, in.DriverVersion = run, "25.5.0"
	in.Profiles[1].InstallMode = "tree"
	in.Contents = contents{
		"reg/drv:a": {"linux/arm64": {found(run)}},
		"reg/drv:b": {"linux/amd64": {versionFile("Version=25.5.0\n"), found(tree + "/script/specific_func.inc"), found(tree + "/tools/npu-smi"), modules()}},
	}
	if p := problems(t, in); p != "" {
		t.Fatalf("good images refused:\n%s", p)
	}
	in.Contents = contents{
		"reg/drv:a": {"linux/arm64": {missing(run, "gone")}},
	}
	p := problems(t, in)
	for _, w := range []string{"profile/a: driver image reg/drv:a (linux/arm64) lacks /usr/local/Ascend/driver.run", "profile/b: driver image reg/drv:b: reading the image's layers took too long", "hooks.preflight.imageContentTimeoutSeconds"} {
		if !strings.Contains(p, w) {
			t.Errorf("problems lack %q:\n%s", w, p)
		}
	}
	// An image that is not in the registry is not read: one problem, the
	// registry's.
	in.Images = images{"reg/drv:b": {"amd64"}}
	in.Contents = contents{"reg/drv:b": {"linux/amd64": {versionFile("Version=25.5.0\n"), found(tree + "/script/specific_func.inc"), found(tree + "/tools/npu-smi"), modules()}}}
	if p := problems(t, in); !strings.Contains(p, "not in the registry") || strings.Count(p, "profile/a") != 1 || strings.Contains(p, "profile/b") {
		t.Errorf("want only the registry's problem for profile a:\n%s", p)
	}
}
