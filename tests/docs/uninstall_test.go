package docs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// contractKeys are every label and annotation key npu-stack writes on a
// Node: each method of contract.Keys that takes nothing and returns a
// string, so a key added there is covered here without a list to update.
func contractKeys(t *testing.T) []string {
	t.Helper()
	keys := contract.Keys{Domain: contract.DefaultDomain}
	v, str := reflect.ValueOf(keys), reflect.TypeOf("")
	var out []string
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Method(i)
		if m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0) != str {
			continue
		}
		k := m.Call(nil)[0].String()
		if strings.HasPrefix(k, contract.DefaultDomain+"/") {
			out = append(out, k)
		}
	}
	if len(out) < 15 {
		t.Fatalf("only %d keys found on contract.Keys: %v", len(out), out)
	}
	return out
}

// sectionCommands returns the command lines of file's ```sh blocks under
// the "## heading" section.
func sectionCommands(t *testing.T, file, heading string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	start, end := 0, 0
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case l == "## "+heading:
			start = i + 1
		case start > 0 && end == 0 && strings.HasPrefix(l, "## "):
			end = i + 1
		}
	}
	if start == 0 {
		t.Fatalf("docs/%s has no section %q", file, heading)
	}
	var out []docCommand
	for _, c := range shCommands(t) {
		if c.file == file && c.line > start && (end == 0 || c.line < end) {
			out = append(out, c)
		}
	}
	return out
}

// TestUninstallCleanupRemovesEveryKey runs the kubectl lines of
// installation.md's "Uninstall" against a node carrying every label and
// annotation npu-stack writes, and checks that none is left.
func TestUninstallCleanupRemovesEveryKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names, err := env.AddNodes(ctx, 1, "uninstall", nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := contractKeys(t)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := env.Client.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, k := range keys {
			node.Labels[k] = "true"
			node.Annotations[k] = "true"
		}
		_, err = env.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, c := range sectionCommands(t, "installation.md", "Uninstall") {
		if !strings.HasPrefix(c.text, "kubectl ") {
			continue
		}
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", c.text)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PATH="+kubectlDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		ran++
	}
	if ran == 0 {
		t.Fatal("installation.md's Uninstall section has no kubectl command")
	}
	node, err := env.Client.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]string{node.Labels, node.Annotations} {
		for k := range m {
			if strings.HasPrefix(k, contract.DefaultDomain+"/") {
				t.Errorf("%s is still on node %s after the documented cleanup", k, node.Name)
			}
		}
	}
}
