package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RepoRoot finds the npu-stack checkout this code was built from.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locate the npu-stack module: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("locate the npu-stack module: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

func resolveBinDir(dir string) (string, error) {
	if dir == "" {
		if env := os.Getenv("NPU_STACK_CP_DIR"); env != "" {
			dir = filepath.Join(env, "bin")
		} else {
			root, err := RepoRoot()
			if err != nil {
				return "", err
			}
			dir = filepath.Join(root, ".cache", "controlplane", "bin")
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "registry"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("control-plane binary %s missing in %s: run `make controlplane` (ci/build-controlplane.sh) first", b, dir)
		}
	}
	return dir, nil
}

// EnginesDir is where ci/build-engines.sh puts the deployment engines
// (helm CLIs, helmfile, helm-controller, Argo CD): $NPU_STACK_ENGINES_DIR
// or <repo>/.cache/engines, once `make test`'s background build is done.
func EnginesDir() (string, error) {
	if err := waitBuild(BuildEngines); err != nil {
		return "", err
	}
	if env := os.Getenv("NPU_STACK_ENGINES_DIR"); env != "" {
		return env, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "engines"), nil
}

// Engine returns the path of rel (for example "helm3/helm") under
// EnginesDir, or an error saying how to build it.
func Engine(rel string) (string, error) {
	dir, err := EnginesDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("deployment engine %s missing in %s: run `make engines` (ci/build-engines.sh) first", rel, dir)
	}
	return p, nil
}
