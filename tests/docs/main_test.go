// Package docs_test keeps docs/ and README.md honest: every example values file and the
// values inside the helmfile, Flux and Argo CD examples pass the chart's
// strict schema, the deployer files point at the chart and values that
// exist, and every kubectl / npu-hooks command line of the docs' ```sh
// blocks runs verbatim (node placeholder aside) against the local control
// plane with the chart installed the way docs/installation.md says.
package docs_test

import (
	"os"
	"testing"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env, testbed.BuildEngines)) }
