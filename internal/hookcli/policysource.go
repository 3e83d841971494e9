package hookcli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

// PolicyArgsKey is the key of the policy ConfigMap holding the policy
// flags, one a line.
const PolicyArgsKey = "args"

// runPolicy is the policy one run of the controller decides under.
type runPolicy struct {
	policy  rollout.Policy
	targets []rollout.TargetSpec
	mode    contract.LeftBehindMode
	// args are the ConfigMap's lines it was read from ("" = the flags).
	args string
}

// flagPolicy is the policy of the command line.
func (f *rolloutFlags) flagPolicy() (runPolicy, error) {
	pol, targets, err := f.policy.parse()
	if err != nil {
		return runPolicy{}, err
	}
	mode, err := parseLeftBehind(f.leftBehind)
	if err != nil {
		return runPolicy{}, err
	}
	return runPolicy{policy: pol, targets: targets, mode: mode}, nil
}

func parseLeftBehind(s string) (contract.LeftBehindMode, error) {
	mode := contract.LeftBehindMode(s)
	if !slices.Contains(contract.LeftBehindModes, mode) {
		return "", fmt.Errorf("--nodes-left-behind %q: use one of %v", s, contract.LeftBehindModes)
	}
	return mode, nil
}

// configMapPolicy parses the policy ConfigMap's args over the defaults:
// the chart writes every policy flag there. Re-roll targets and the
// deadline stay those of the command line (they are the run's, not the
// policy's).
func (f *rolloutFlags) configMapPolicy(args string) (runPolicy, error) {
	var pf policyFlags
	var mode string
	fs := pflag.NewFlagSet("policy", pflag.ContinueOnError)
	pf.add(fs)
	fs.StringVar(&mode, "nodes-left-behind", string(contract.LeftBehindFailIfOutOfDate), "")
	var lines []string
	for _, l := range strings.Split(args, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if err := fs.Parse(lines); err != nil {
		return runPolicy{}, fmt.Errorf("policy ConfigMap %s/%s: %w", f.cluster.namespace, f.policyConfigMap, err)
	}
	pf.reroll, pf.deadline = f.policy.reroll, f.policy.deadline
	pol, targets, err := pf.parse()
	if err != nil {
		return runPolicy{}, fmt.Errorf("policy ConfigMap %s/%s: %w", f.cluster.namespace, f.policyConfigMap, err)
	}
	m, err := parseLeftBehind(mode)
	if err != nil {
		return runPolicy{}, fmt.Errorf("policy ConfigMap %s/%s: %w", f.cluster.namespace, f.policyConfigMap, err)
	}
	return runPolicy{policy: pol, targets: targets, mode: m, args: args}, nil
}

// currentPolicy is the newest policy: the ConfigMap's when --policy-configmap
// names one that exists, else the flags'.
func (f *rolloutFlags) currentPolicy(ctx context.Context, client kubernetes.Interface) (runPolicy, error) {
	if f.policyConfigMap == "" {
		return f.flagPolicy()
	}
	cm, err := client.CoreV1().ConfigMaps(f.cluster.namespace).Get(ctx, f.policyConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return f.flagPolicy()
	case err != nil:
		return runPolicy{}, fmt.Errorf("read the policy ConfigMap %s/%s: %w", f.cluster.namespace, f.policyConfigMap, err)
	}
	return f.configMapPolicy(cm.Data[PolicyArgsKey])
}

// watchPolicy calls changed once, as soon as the policy ConfigMap holds
// other args than current (written by a newer helm upgrade, Argo CD or
// Flux sync), until ctx ends. Without --policy-configmap it does nothing.
func (f *rolloutFlags) watchPolicy(ctx context.Context, client kubernetes.Interface, current string, changed func()) {
	if f.policyConfigMap == "" {
		return
	}
	var once sync.Once
	see := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Data[PolicyArgsKey] != current {
			once.Do(changed)
		}
	}
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", f.cluster.namespace,
		fields.OneTermEqualSelector("metadata.name", f.policyConfigMap))
	_, inf := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}})
	go inf.Run(ctx.Done())
}
