package release

import (
	"bytes"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const simhostPkg = "github.com/openfuyao/npu-stack/internal/host/simhost"

// agents are the binaries that can act on a host; npu-hooks never does.
var agents = []string{"npu-rebooter", "npu-healthwatch"}

// TestReleaseBuildHasNoSimulatedHost: the simulated host is linked in
// only with the build tag simhost (the test bed's agents). The binaries
// `make build` and `make images` build have none of it, say so in their
// build information, and refuse the test bed's NPU_STACK_SIM_HOST rather
// than act on the real machine. npu-hooks is the same program either way.
func TestReleaseBuildHasNoSimulatedHost(t *testing.T) {
	root := repoRoot(t)
	deps := func(tags string, cmd string) string {
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		c := exec.Command("go", append(args, "./cmd/"+cmd)...)
		c.Dir = root
		out, err := c.Output()
		if err != nil {
			t.Fatalf("go %v: %v", args, err)
		}
		return string(out)
	}
	for _, cmd := range agents {
		if strings.Contains(deps("", cmd), simhostPkg+"\n") {
			t.Errorf("%s without tags depends on %s", cmd, simhostPkg)
		}
		if !strings.Contains(deps("simhost", cmd), simhostPkg+"\n") {
			t.Errorf("%s with the tag simhost does not depend on %s: the test bed's agents could not be simulated", cmd, simhostPkg)
		}
	}
	if a, b := deps("", "npu-hooks"), deps("simhost", "npu-hooks"); a != b {
		t.Errorf("npu-hooks depends on other packages with the tag simhost:\n%s\nwithout:\n%s", b, a)
	}

	release, test := filepath.Join(t.TempDir(), "release"), filepath.Join(t.TempDir(), "test")
	runMake(t, root, "build", "BIN_DIR="+release)
	runMake(t, root, "build", "BIN_DIR="+test, "GOTAGS=simhost")
	for _, bin := range agents {
		rel, tst := inspect(t, filepath.Join(release, bin)), inspect(t, filepath.Join(test, bin))
		if rel.simhost || rel.tags != "" {
			t.Errorf("release %s: simhost functions %v, build tags %q; want none", bin, rel.simhost, rel.tags)
		}
		if !tst.simhost || tst.tags != "simhost" {
			t.Errorf("test-bed %s: simhost functions %v, build tags %q; want the simulated host", bin, tst.simhost, tst.tags)
		}
	}

	// The release agents refuse the variable before they touch anything.
	hostDir := t.TempDir()
	for bin, args := range map[string][]string{
		"npu-rebooter":    {"run", "--node-name=n1", "--namespace=npu-system", "--kubeconfig=" + filepath.Join(hostDir, "no-kubeconfig")},
		"npu-healthwatch": {"install-binary", "--to=" + filepath.Join(hostDir, "bin")},
	} {
		c := exec.Command(filepath.Join(release, bin), args...)
		c.Env = append(os.Environ(), "NPU_STACK_SIM_HOST="+hostDir)
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "NPU_STACK_SIM_HOST") || !strings.Contains(string(out), "not in this build") {
			t.Errorf("release %s %v with NPU_STACK_SIM_HOST set: %v\n%s\nwant a refusal naming the variable", bin, args, err, out)
		}
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) != 0 {
		t.Errorf("the refusing agents wrote into %s", hostDir)
	}
}

type built struct {
	simhost bool   // function names of the simhost package are in it
	tags    string // the -tags it was built with
}

func inspect(t *testing.T, path string) built {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b built
	for _, s := range bi.Settings {
		if s.Key == "-tags" {
			b.tags = s.Value
		}
	}
	// -s -w strip the symbol table, but the function table that stack
	// traces read keeps every linked function's name.
	b.simhost = bytes.Contains(data, []byte(simhostPkg+"."))
	return b
}
