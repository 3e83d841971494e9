// Package rollout_test runs npu-hooks against the real local control
// plane: preflight's refusals, the lease, and whole rollouts on simulated
// nodes with the real rebooter and driver gate.
package rollout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// env is the package's control plane. Its tests run in parallel
// (t.Parallel, -parallel of them at once, GOMAXPROCS by default): each
// has its own namespace, fleet label and nodes. Those that stop a
// control-plane component (chaos, outage) or read the API server's whole
// state (cache) do not call t.Parallel, so Go runs them alone, before the
// parallel ones start.
var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func namespace(t *testing.T) string {
	t.Helper()
	ns, err := env.NewNamespace(ctxTimeout(t, time.Minute), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// result is one finished run of npu-hooks.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// hooks runs npu-hooks with args as an admin and waits for it.
func hooks(ctx context.Context, t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(env.ProductBinDir, "npu-hooks"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run npu-hooks %s: %v", strings.Join(args, " "), err)
	}
	return r
}
