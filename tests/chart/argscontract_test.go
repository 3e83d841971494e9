package chart_test

import (
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// ourBinaries are the images/commands of npu-stack itself; every argument
// list the chart gives them must parse.
var ourBinaries = map[string]bool{"npu-hooks": true, "npu-rebooter": true, "npu-healthwatch": true}

// binaryOf names which of our binaries a container runs, if any.
func binaryOf(c map[string]any) string {
	if cmd := strs(c["command"]); len(cmd) > 0 {
		if b := path.Base(cmd[0]); ourBinaries[b] {
			return b
		}
		return ""
	}
	img, _ := c["image"].(string)
	img, _, _ = strings.Cut(img, "@")
	if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
		img = img[:i]
	}
	if b := path.Base(img); ourBinaries[b] {
		return b
	}
	return ""
}

// TestChartArgumentsParse runs every npu-stack container's command line of
// every variant, plus exec probes, through the real binary's flag parser
// (with --help appended, so nothing runs): a renamed or mistyped flag in
// either the chart or a binary fails here, not on a cluster.
func TestChartArgumentsParse(t *testing.T) {
	testbed.NeedEnv(t, env)
	checked := map[string]bool{}
	for _, v := range variants() {
		r := mustRender(t, v)
		for _, o := range r.objects {
			spec := podSpecOrNil(o)
			if spec == nil {
				continue
			}
			var ctrs []any
			for _, k := range []string{"initContainers", "containers"} {
				if cs, ok := spec[k].([]any); ok {
					ctrs = append(ctrs, cs...)
				}
			}
			for _, ci := range ctrs {
				c := ci.(map[string]any)
				lines := [][]string{}
				if b := binaryOf(c); b != "" {
					cmd := strs(c["command"])
					args := strs(c["args"])
					if len(cmd) > 1 {
						args = append(cmd[1:], args...)
					}
					lines = append(lines, append([]string{b}, args...))
				}
				if probe, ok := c["readinessProbe"].(map[string]any); ok {
					if ex, ok := probe["exec"].(map[string]any); ok {
						if cmd := strs(ex["command"]); len(cmd) > 0 && ourBinaries[path.Base(cmd[0])] {
							lines = append(lines, append([]string{path.Base(cmd[0])}, cmd[1:]...))
						}
					}
				}
				for _, line := range lines {
					line = expandEnvRefs(line)
					key := strings.Join(line, " ")
					if checked[key] {
						continue
					}
					checked[key] = true
					args := append(withoutPassthrough(line[1:]), "--help")
					out, err := exec.Command(filepath.Join(env.ProductBinDir, line[0]), args...).CombinedOutput()
					if err != nil {
						t.Errorf("%s: %s %s/%s: %s does not accept the chart's arguments: %v\n%s", v.name, o.GetKind(), o.GetName(), c["name"], key, err, out)
					}
				}
			}
		}
	}
	if len(checked) < 8 {
		t.Fatalf("only %d command lines found; the search for our containers is broken", len(checked))
	}
}

// withoutPassthrough drops what follows "--" (the vendor install command).
func withoutPassthrough(args []string) []string {
	for i, a := range args {
		if a == "--" {
			return args[:i]
		}
	}
	return args
}

// expandEnvRefs fills $(VAR) references with a placeholder, as the kubelet
// would with the downward API.
func expandEnvRefs(line []string) []string {
	out := make([]string, len(line))
	for i, a := range line {
		out[i] = strings.ReplaceAll(a, "$(NODE_NAME)", "node-a")
	}
	return out
}

func podSpecOrNil(o *unstructured.Unstructured) map[string]any {
	for _, p := range [][]string{{"spec", "template", "spec"}, {"spec", "jobTemplate", "spec", "template", "spec"}} {
		if s, ok, _ := unstructured.NestedMap(o.Object, p...); ok {
			return s
		}
	}
	return nil
}

// TestOurContainersGetTheMemoryLimitAsGOMEMLIMIT: each long-running
// container of ours has the Go runtime's soft limit at its memory limit,
// so a large fleet makes the garbage collector work harder rather than
// the kernel kill the process.
func TestOurContainersGetTheMemoryLimitAsGOMEMLIMIT(t *testing.T) {
	seen := 0
	for _, v := range variants() {
		for _, o := range mustRender(t, v).objects {
			spec := podSpecOrNil(o)
			if spec == nil {
				continue
			}
			cs, _ := spec["containers"].([]any)
			for _, ci := range cs {
				c := ci.(map[string]any)
				if binaryOf(c) == "" {
					continue
				}
				seen++
				found := false
				for _, ei := range asList(c["env"]) {
					e := ei.(map[string]any)
					ref, _, _ := unstructured.NestedString(e, "valueFrom", "resourceFieldRef", "resource")
					found = found || (e["name"] == "GOMEMLIMIT" && ref == "limits.memory")
				}
				if !found {
					t.Errorf("%s: %s %s container %s has no GOMEMLIMIT from limits.memory", v.name, o.GetKind(), o.GetName(), c["name"])
				}
			}
		}
	}
	if seen < 4 {
		t.Fatalf("only %d containers of ours found; the search is broken", seen)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
