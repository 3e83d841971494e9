package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Labels the chart puts on every object and pod template
// (npu-stack.selectorLabels). Helm release names are unique in a
// namespace, so instance=<release> in the namespace is the release's.
const (
	labelInstance  = "app.kubernetes.io/instance"
	labelComponent = "app.kubernetes.io/component"
)

// Components of the chart's Jobs and pods, as app.kubernetes.io/component.
const (
	// ComponentUninstall is the pre-delete hook Job running npu-hooks
	// uninstall: never deleted by itself (Helm deletes it once it
	// succeeded).
	ComponentUninstall = "uninstall"
	componentRollout   = "rollout"
	componentResume    = "rollout-resume"
	componentPreflight = "preflight"
)

// Config is what Run is told.
type Config struct {
	Client    kubernetes.Interface
	Keys      contract.Keys
	Namespace string
	// Release is the Helm release (app.kubernetes.io/instance).
	Release string
	// LeaseName is the rollout's single-writer Lease (npu-hooks rollout
	// --lease-name).
	LeaseName string
	// Request names this uninstall on the driver DaemonSets; the driver
	// pods repeat it in their HostFilesRemoved Events.
	Request string
	// DryRun prints what would be done and changes nothing.
	DryRun bool
	// Out gets one line per action.
	Out io.Writer
}

// Validate rejects a configuration Run cannot act on.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "":
		return errors.New("--namespace is empty: name the namespace npu-stack was installed in (npu-operator by default)")
	case c.Release == "":
		return errors.New("--release is empty: name the Helm release (npu-stack by default; helm list -A shows it)")
	case c.LeaseName == "":
		return errors.New("--lease-name is empty: the rollout's Lease is npu-stack-rollout unless its --lease-name was changed")
	case c.Request == "":
		return errors.New("no request name for the driver pods")
	}
	return nil
}

// Report is what Run did (or, dry, would do).
type Report struct {
	// Cleaned are the nodes whose npu-stack keys were removed.
	Cleaned []string
	// Uncordoned are the nodes npu-stack had cordoned.
	Uncordoned []string
	// KeptCordoned are cordoned nodes with npu-stack keys whose cordon was
	// not npu-stack's.
	KeptCordoned []string
	// HostFilesRemoved are the nodes whose driver pod reported removing
	// npu-stack's host files; HostFilesLeft the nodes with a driver pod
	// that did not.
	HostFilesRemoved, HostFilesLeft []string
	// NoAgents: the release's DaemonSets were gone already, so no driver
	// pod could remove host files.
	NoAgents bool
}

// Run takes the release off the cluster, in an order where no step of
// npu-stack races the next: the rollout first (its Jobs, the resume
// CronJob, its Lease), so nothing cordons or labels a node any more, and
// its records (ConfigMaps), which nothing writes once it stopped; then
// the node agents (their DaemonSets, deleted after the driver
// DaemonSets are marked with the request, so their pods remove
// npu-stack's host files as they stop), so nothing writes a node's keys
// again; then every Node (keys removed, npu-stack's cordons lifted), then
// the reboot-slot Leases. Each step reads the cluster afresh: a second
// run finds nothing to do.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	u := &run{cfg: cfg}
	if err := u.stopRollout(ctx); err != nil {
		return u.report, err
	}
	if err := u.deleteRecords(ctx); err != nil {
		return u.report, err
	}
	if err := u.stopAgents(ctx); err != nil {
		return u.report, err
	}
	if err := u.cleanNodes(ctx); err != nil {
		return u.report, err
	}
	if err := u.deleteSlots(ctx); err != nil {
		return u.report, err
	}
	u.summary()
	return u.report, nil
}

type run struct {
	cfg    Config
	report Report
}

// act does one change, or with DryRun only says it would.
func (u *run) act(ctx context.Context, verb, done, what string, do func(context.Context) error) error {
	if u.cfg.DryRun {
		u.printf("would %s %s", verb, what)
		return nil
	}
	if err := do(ctx); err != nil {
		return err
	}
	u.printf("%s %s", done, what)
	return nil
}

func (u *run) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(u.cfg.Out, format+"\n", args...)
}

func (u *run) ref(kind, name string) string { return kind + " " + u.cfg.Namespace + "/" + name }

// selector is instance=<release> plus component in/notin components.
func (u *run) selector(op selection.Operator, components ...string) string {
	sel := labels.NewSelector()
	inst, _ := labels.NewRequirement(labelInstance, selection.Equals, []string{u.cfg.Release})
	sel = sel.Add(*inst)
	if len(components) > 0 {
		comp, err := labels.NewRequirement(labelComponent, op, components)
		if err != nil {
			// The components are this package's constants.
			panic(err)
		}
		sel = sel.Add(*comp)
	}
	return sel.String()
}

func (u *run) summary() {
	r := u.report
	verb := "finished"
	if u.cfg.DryRun {
		verb = "dry run finished, nothing changed"
	}
	var host string
	switch {
	case r.NoAgents:
		host = "no node agent left to remove npu-stack's host files (gone before this run)"
	case len(r.HostFilesLeft) > 0:
		host = fmt.Sprintf("host files removed on %d nodes, not confirmed on %s", len(r.HostFilesRemoved), strings.Join(r.HostFilesLeft, ", "))
	default:
		host = fmt.Sprintf("host files removed on %d nodes", len(r.HostFilesRemoved))
	}
	u.printf("uninstall %s: %d nodes cleaned, %d uncordoned, %d kept cordoned (not npu-stack's cordon); %s; the installed driver stays on the hosts",
		verb, len(r.Cleaned), len(r.Uncordoned), len(r.KeptCordoned), host)
}
