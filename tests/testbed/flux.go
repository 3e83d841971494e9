package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// The Flux kinds the test bed drives. Only unstructured objects are used,
// so npu-stack's module does not depend on Flux's API modules.
var (
	HelmReleaseGVR      = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
	ExternalArtifactGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "externalartifacts"}
	OCIRepositoryGVR    = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "ocirepositories"}
	fluxCRDGVR          = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// fluxFieldManager owns what the test bed applies and the artifacts' status,
// as source-controller would own the latter.
const fluxFieldManager = "npu-stack-testbed"

// Flux is Flux's real source-controller and helm-controller (built by
// ci/engines/source-controller and ci/engines/flux) running against a
// control plane: source-controller reconciles OCIRepositories and serves
// their artifacts over loopback HTTP, helm-controller installs from them.
// The test bed can also play a source itself (PublishChart), serving
// chart archives as ExternalArtifact objects, Flux's extension point for
// third-party sources. Run one at a time per control plane: two would
// reconcile the same objects.
type Flux struct {
	dyn     dynamic.Interface
	comp    *component // helm-controller
	source  *component // source-controller
	store   *fluxArtifacts
	stopped bool
	cp      *ControlPlane
	logDir  string
	port    int // helm-controller's health port
}

// StartFlux applies the Flux CRDs (helm-controller's and
// source-controller's), starts source-controller and helm-controller (the
// ExternalArtifact feature gate on) against c's API server, and waits
// until the CRDs are Established and both controllers answer their health
// endpoints. Stop ends them; they also die with the test binary.
func (c *ControlPlane) StartFlux(ctx context.Context) (_ *Flux, err error) {
	engines, err := EnginesDir()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	f := &Flux{dyn: dyn, cp: c, logDir: filepath.Join(c.Dir, "logs")}
	defer func() {
		if err != nil {
			_ = f.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := applyCRDs(ctx, dyn, filepath.Join(engines, "flux", "crds")); err != nil {
		return nil, err
	}
	if f.store, err = startFluxArtifacts(c.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	if f.source, err = startSourceController(ctx, c, f.logDir); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	f.port = ports[0]
	if err := f.StartHelmController(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// StartHelmController (re)starts helm-controller and waits for its health
// endpoint: StartFlux's second half, and the restart of a controller a
// test killed.
func (f *Flux) StartHelmController(ctx context.Context) (err error) {
	bin, err := Engine("bin/helm-controller")
	if err != nil {
		return err
	}
	// helm-controller takes its kubeconfig from $KUBECONFIG only (the
	// controller-runtime --kubeconfig flag is a Go flag its pflag set never
	// parses), and startComponent passes the test's environment on, so
	// env(1) sets it; the *_LOCALHOST variables would make it fetch
	// artifacts from another host than the URL the sources publish.
	envBin, err := exec.LookPath("env")
	if err != nil {
		return fmt.Errorf("start helm-controller: %w", err)
	}
	args := []string{
		"-u", "SOURCE_CONTROLLER_LOCALHOST", "-u", "SOURCE_WATCHER_LOCALHOST",
		"KUBECONFIG=" + f.cp.Kubeconfig,
		bin,
		"--feature-gates=ExternalArtifact=true",
		"--watch-all-namespaces=true",
		"--enable-leader-election=false",
		"--metrics-addr=0",
		"--health-addr=127.0.0.1:" + strconv.Itoa(f.port),
		"--log-level=debug",
		"--log-encoding=console",
		// A HelmRelease whose artifact is not there yet is retried after
		// this, not after the default 30 s.
		"--requeue-dependency=5s",
		"--graceful-shutdown-timeout=10s",
	}
	if f.comp, err = startComponent("helm-controller", envBin, args, f.logDir); err != nil {
		return err
	}
	f.stopped = false
	return waitHealthy(ctx, f.comp, "http://127.0.0.1:"+strconv.Itoa(f.port)+"/readyz")
}

// KillHelmController ends helm-controller with SIGKILL, as a node loss or
// an OOM kill would: no graceful shutdown, whatever Helm action it runs is
// left as it is. StartHelmController brings it back.
func (f *Flux) KillHelmController() error {
	if f.comp == nil {
		return errors.New("helm-controller was never started")
	}
	f.stopped = true
	return f.comp.kill()
}

// waitHealthy polls health until it answers 200, failing at once if comp
// exits (with its log tail).
func waitHealthy(ctx context.Context, comp *component, health string) error {
	probe := func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, health, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := comp.exited(); err != nil {
			return false, err
		}
		ok, err := probe(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s %s: %w; last log lines:\n%s", comp.name, health, errors.Join(err, last), tail(comp.logPath, 20))
	}
	return nil
}

// LogPath is helm-controller's log file, for failure dumps.
func (f *Flux) LogPath() string {
	if f.comp == nil {
		return ""
	}
	return f.comp.logPath
}

// SourceLogPath is source-controller's log file, for failure dumps.
func (f *Flux) SourceLogPath() string {
	if f.source == nil {
		return ""
	}
	return f.source.logPath
}

// Err reports that helm-controller or source-controller has exited, with
// its log tail; nil while both run. Waits on HelmReleases check it to
// fail fast.
func (f *Flux) Err() error {
	if f.stopped {
		return errors.New("helm-controller was stopped")
	}
	if f.comp == nil || f.source == nil {
		return errors.New("Flux was never started")
	}
	return errors.Join(f.comp.exited(), f.source.exited())
}

// Stop ends both controllers and the test bed's artifact server. HelmReleases and the
// releases they installed stay in the cluster. Safe to call more than once.
func (f *Flux) Stop() error {
	f.stopped = true
	var errs []error
	for _, c := range []*component{f.comp, f.source} {
		if c != nil {
			errs = append(errs, c.stop(15*time.Second))
		}
	}
	if f.store != nil {
		errs = append(errs, f.store.close())
	}
	return errors.Join(errs...)
}

// applyCRDs server-side applies every CRD in dir and waits until each is
// Established, so helm-controller's informers find their kinds.
func applyCRDs(ctx context.Context, dyn dynamic.Interface, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Flux CRDs in %s: run `make engines` (ci/build-engines.sh flux) first", dir)
	}
	var names []string
	for _, file := range files {
		objs, err := fluxYAMLObjects(file)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dyn.Resource(fluxCRDGVR).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fluxFieldManager, Force: true}); err != nil {
				return fmt.Errorf("apply CRD %s from %s: %w", obj.GetName(), file, err)
			}
			names = append(names, obj.GetName())
		}
	}
	if !slices.Contains(names, HelmReleaseGVR.GroupResource().String()) || !slices.Contains(names, ExternalArtifactGVR.GroupResource().String()) {
		return fmt.Errorf("the Flux CRDs in %s lack helmreleases or externalartifacts (have %s)", dir, strings.Join(names, ", "))
	}
	var pending []string
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pending = pending[:0]
		for _, name := range names {
			crd, err := dyn.Resource(fluxCRDGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !fluxConditionTrue(crd, "Established") {
				pending = append(pending, name)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the Flux CRDs to be Established (pending: %s): %w", strings.Join(pending, ", "), err)
	}
	return nil
}

// fluxConditionTrue reports whether obj's status.conditions has typ=True.
func fluxConditionTrue(obj *unstructured.Unstructured, typ string) bool {
	c := StatusCondition(obj, typ)
	return c != nil && c["status"] == "True"
}

// StatusCondition returns the status condition of type typ of a Kubernetes or
// Flux object (type, status, reason, message, observedGeneration...), or
// nil.
func StatusCondition(obj *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// WaitHelmRelease polls HelmRelease namespace/name until cond holds and
// returns it; it fails at once if helm-controller exits, with its log
// tail, and on timeout with cond's last error. Polling, not watching:
// the dynamic informer machinery buys nothing for one object.
func (f *Flux) WaitHelmRelease(ctx context.Context, namespace, name string, cond func(*unstructured.Unstructured) (bool, error)) (*unstructured.Unstructured, error) {
	var obj *unstructured.Unstructured
	check := func(ctx context.Context) (bool, error) {
		o, err := f.dyn.Resource(HelmReleaseGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		obj = o
		return cond(o)
	}
	var last error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := f.Err(); err != nil {
			return false, err
		}
		ok, err := check(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		return obj, fmt.Errorf("HelmRelease %s/%s: %w", namespace, name, errors.Join(err, last))
	}
	return obj, nil
}

// HelmReleaseReady is a WaitHelmRelease condition: helm-controller has
// reconciled the current generation and says Ready=True. Its error
// carries the Ready condition's reason and message while it does not hold.
func HelmReleaseReady(hr *unstructured.Unstructured) (bool, error) {
	ready := StatusCondition(hr, "Ready")
	observed, _, _ := unstructured.NestedInt64(hr.Object, "status", "observedGeneration")
	if ready != nil && ready["status"] == "True" && observed == hr.GetGeneration() {
		return true, nil
	}
	if ready == nil {
		return false, fmt.Errorf("no Ready condition (observed generation %d of %d)", observed, hr.GetGeneration())
	}
	return false, fmt.Errorf("condition Ready=%v %v: %v (observed generation %d of %d)", ready["status"], ready["reason"], ready["message"], observed, hr.GetGeneration())
}
