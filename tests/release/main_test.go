package release

import (
	"os"
	"testing"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// env is the test bed (control plane and registry) of TestRelease...;
// nil under -short, where the package's other tests still run.
var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.MainUnlessShort(m, &env)) }
