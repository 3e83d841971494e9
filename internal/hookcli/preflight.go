package hookcli

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/drivertree"
	"github.com/openfuyao/npu-stack/internal/preflight"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

type preflightFlags struct {
	cluster        clusterFlags
	driverEnabled  bool
	driverVersion  string
	profileLabels  string
	profiles       []string
	maxUnavailable string
	waitSelector   string
	podDelForce    bool
	podDelEmptyDir bool
	drain          bool
	drainForce     bool
	drainEmptyDir  bool
	drainSelector  string
	skipImageCheck bool
	skipContents   bool
	insecure       bool
	pullSecretDir  string
	imageTimeout   time.Duration
	contentTimeout time.Duration
	installer      string
	imageTree      string
}

// NewPreflight is `npu-hooks preflight`.
func NewPreflight(g *cli.GlobalOptions) *cobra.Command {
	var f preflightFlags
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Refuse an install or upgrade that would get stuck (exit 2 with every problem and its fix)",
		Long: `Checks, before Helm changes anything: every NPU node is covered by exactly
one driver profile; each used profile's driver image exists in its registry
(with the chart's pull secrets; --skip-image-check for air-gapped
registries) and holds what the profile's install mode needs, for each
architecture of its nodes: the installer (run) or the driver tree (tree),
whose version.info must name --driver-version (its layers are streamed,
tar headers only, top layer first, within --image-content-timeout;
--skip-image-content-check skips that); the maxUnavailable budget is not already spent by cordoned or
NotReady nodes; the NPU pods on nodes to upgrade can be evicted under the
policy (unmanaged pods need force, emptyDir data needs deleteEmptyDir).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.Logger(cmd.ErrOrStderr())
			if err != nil {
				return cli.Terminal(err)
			}
			in, client, err := f.input()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: f.cluster.nodeSelector})
			if err != nil {
				return fmt.Errorf("list NPU nodes (%s): %w", f.cluster.nodeSelector, err)
			}
			for i := range nodes.Items {
				in.Nodes = append(in.Nodes, &nodes.Items[i])
			}
			in.Evictable = f.evictable(client)
			res, err := preflight.Run(ctx, in)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(res.Problems) > 0 {
				lines := make([]string, len(res.Problems))
				for i, p := range res.Problems {
					lines[i] = "  - " + p.String()
				}
				return cli.Terminalf("preflight refused the change; it would get stuck:\n%s%s", strings.Join(lines, "\n"), warnings(res.Warnings))
			}
			if len(res.Warnings) > 0 {
				if _, err := fmt.Fprintln(out, strings.TrimPrefix(warnings(res.Warnings), "\n")); err != nil {
					return err
				}
			}
			log.WithField("nodes", len(in.Nodes)).Info("preflight passed")
			_, err = fmt.Fprintf(out, "preflight passed: %d NPU nodes, %d driver profiles, %d nodes to move to driver %s\n",
				len(in.Nodes), len(in.Profiles), len(res.ToUpgrade), f.driverVersion)
			return err
		},
	}
	fs := cmd.Flags()
	f.cluster.add(fs)
	fs.BoolVar(&f.driverEnabled, "driver-enabled", true, "the chart manages the driver (false: pre-installed driver, nothing to check)")
	fs.StringVar(&f.driverVersion, "driver-version", "", "the driver version being installed (driver.version)")
	fs.StringVar(&f.profileLabels, "profile-labels", "chip="+contract.LabelChip+",kernel="+contract.LabelKernel+",os="+contract.LabelOS, "node label keys of a profile's chip, kernel and os")
	fs.StringArrayVar(&f.profiles, "profile", nil, `a driver profile as JSON: {"name","chip","kernel","os","nodeSelector","image","installMode"} (repeatable; installMode run, the default, or tree)`)
	fs.StringVar(&f.maxUnavailable, "max-unavailable", "25%", "driver.upgradePolicy.maxUnavailable")
	fs.StringVar(&f.waitSelector, "wait-for-completion-selector", "", "driver.upgradePolicy.waitForCompletion.podSelector")
	fs.BoolVar(&f.podDelForce, "npu-pod-deletion-force", false, "driver.upgradePolicy.npuPodDeletion.force")
	fs.BoolVar(&f.podDelEmptyDir, "npu-pod-deletion-delete-emptydir", false, "driver.upgradePolicy.npuPodDeletion.deleteEmptyDir")
	fs.BoolVar(&f.drain, "drain", false, "driver.upgradePolicy.drain.enable")
	fs.BoolVar(&f.drainForce, "drain-force", false, "driver.upgradePolicy.drain.force")
	fs.BoolVar(&f.drainEmptyDir, "drain-delete-emptydir", false, "driver.upgradePolicy.drain.deleteEmptyDir")
	fs.StringVar(&f.drainSelector, "drain-selector", "", "driver.upgradePolicy.drain.podSelector")
	fs.BoolVar(&f.skipImageCheck, "skip-image-check", false, "do not ask the registry whether the driver images exist (air-gapped registries)")
	fs.BoolVar(&f.insecure, "insecure-registry", false, "talk plain HTTP to the driver image registry")
	fs.DurationVar(&f.imageTimeout, "image-check-timeout", 30*time.Second, "how long to wait for the registry's answer about one driver image before refusing")
	fs.BoolVar(&f.skipContents, "skip-image-content-check", false, "do not read the driver images' layers for what the install mode needs (the tag is still checked)")
	fs.DurationVar(&f.contentTimeout, "image-content-timeout", preflight.DefaultContentTimeout, "how long reading one driver image's layers may take before refusing (helm's --timeout bounds the whole hook)")
	fs.StringVar(&f.installer, "driver-installer", "/usr/local/Ascend/driver.run", "driver.installCommand[0]: the installer in the image of a run-mode profile")
	fs.StringVar(&f.imageTree, "driver-image-tree", drivertree.DefaultImageTree, "driver.imageTreePath: the driver tree in the image of a tree-mode profile")
	fs.StringVar(&f.pullSecretDir, "pull-secret-dir", "/etc/npu-stack/pull-secrets", "directory of mounted imagePullSecrets (<dir>/<secret>/.dockerconfigjson)")
	return cmd
}

func (f *preflightFlags) input() (preflight.Input, kubernetes.Interface, error) {
	var in preflight.Input
	cl, err := f.cluster.parse()
	if err != nil {
		return in, nil, cli.Terminal(err)
	}
	in.Keys, in.DriverEnabled, in.DriverVersion = cl.keys, f.driverEnabled, f.driverVersion
	in.MaxUnavailable = intstr.Parse(f.maxUnavailable)
	if _, err := rollout.ResolveMaxUnavailable(in.MaxUnavailable, 100); err != nil {
		return in, nil, cli.Terminalf("--max-unavailable: %w", err)
	}
	if in.ProfileLabels, err = parseProfileLabels(f.profileLabels); err != nil {
		return in, nil, cli.Terminal(err)
	}
	if f.driverEnabled && f.driverVersion == "" {
		return in, nil, cli.Terminalf("--driver-version is required when the driver is enabled")
	}
	for _, s := range f.profiles {
		p, err := preflight.ParseProfile(s)
		if err != nil {
			return in, nil, cli.Terminalf("--profile: %w", err)
		}
		in.Profiles = append(in.Profiles, p)
	}
	if f.driverEnabled && len(in.Profiles) == 0 {
		return in, nil, cli.Terminalf("no --profile given: driver.profiles must list at least one profile")
	}
	if !f.skipImageCheck {
		kc, err := preflight.LoadPullSecrets(f.pullSecretDir)
		if err != nil {
			return in, nil, cli.Terminal(err)
		}
		reg := preflight.Registry{Keychain: kc, Insecure: f.insecure, Timeout: f.imageTimeout, ContentTimeout: f.contentTimeout}
		in.Images = reg
		if !f.skipContents {
			in.Contents = reg
		}
	}
	for flag, p := range map[string]string{"--driver-installer": f.installer, "--driver-image-tree": f.imageTree} {
		if !path.IsAbs(p) {
			return in, nil, cli.Terminalf("%s=%q: want an absolute path in the driver image", flag, p)
		}
	}
	in.DriverInstaller, in.DriverImageTree = f.installer, f.imageTree
	client, _, err := f.cluster.client.Client()
	return in, client, err
}

// evictable checks the pods of a node against the steps the rollout will
// run there.
func (f *preflightFlags) evictable(client kubernetes.Interface) func(context.Context, string) error {
	pol := rollout.Policy{
		PodDeletion: rollout.EvictPolicy{Force: f.podDelForce, DeleteEmptyDir: f.podDelEmptyDir},
		Drain:       rollout.DrainPolicy{Enable: f.drain, Selector: f.drainSelector, EvictPolicy: rollout.EvictPolicy{Force: f.drainForce, DeleteEmptyDir: f.drainEmptyDir}},
	}
	return func(ctx context.Context, node string) error {
		err := rollout.CheckEvictable(ctx, client, node, rollout.EvictNPUPods, pol)
		if pol.Drain.Enable {
			err = errors.Join(err, rollout.CheckEvictable(ctx, client, node, rollout.EvictDrain, pol))
		}
		return err
	}
}

func parseProfileLabels(s string) (preflight.ProfileLabels, error) {
	var l preflight.ProfileLabels
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return l, fmt.Errorf("--profile-labels %q: want chip=<key>,kernel=<key>,os=<key>", s)
		}
		switch k {
		case "chip":
			l.Chip = v
		case "kernel":
			l.Kernel = v
		case "os":
			l.OS = v
		default:
			return l, fmt.Errorf("--profile-labels %q: unknown field %q (want chip, kernel, os)", s, k)
		}
	}
	if l.Chip == "" || l.Kernel == "" || l.OS == "" {
		return l, fmt.Errorf("--profile-labels %q: chip, kernel and os are all required", s)
	}
	return l, nil
}

// warnings lists ws one a line after a heading line, or nothing.
func warnings(ws []preflight.Problem) string {
	if len(ws) == 0 {
		return ""
	}
	lines := make([]string, len(ws))
	for i, w := range ws {
		lines[i] = "  - " + w.String()
	}
	return "\nwarnings (not refused):\n" + strings.Join(lines, "\n")
}
