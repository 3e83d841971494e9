// Package healthwatch builds the npu-healthwatch command line: flag parsing
// and wiring of the host, the Kubernetes client and the logic packages
// (health, driverentry, validate, cdi). No decision is taken here.
package healthwatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/atomicfile"
	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/driverentry"
	"github.com/openfuyao/npu-stack/internal/drivertree"
	"github.com/openfuyao/npu-stack/internal/dstarget"
	"github.com/openfuyao/npu-stack/internal/health"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/agenthost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/internal/validate"
)

// Name is the binary's name, also the source of its Events.
const Name = "npu-healthwatch"

// shared are the flags and helpers every subcommand uses.
type shared struct {
	global   cli.GlobalOptions
	hostRoot string
	npuSMI   string
	// sim is the simulated machine a unit test hands in, nil otherwise.
	sim host.Host
}

// NewRoot returns the npu-healthwatch command with every subcommand.
func NewRoot() *cobra.Command { return newRoot(&shared{}) }

func newRoot(s *shared) *cobra.Command {
	root := cli.NewRoot(Name, "Per-node NPU chip health-watch, driver entry gate, validator and CDI generator", &s.global)
	root.PersistentFlags().StringVar(&s.hostRoot, "host-root", "/", "where the host's / is mounted in this container (the chart mounts it at /host); every host path flag is resolved under it")
	root.PersistentFlags().StringVar(&s.npuSMI, "npu-smi", "", "npu-smi as a host path; empty searches /usr/local/sbin/npu-smi, /usr/local/bin/npu-smi, then <driver-root>/tools/npu-smi")
	root.AddCommand(s.installBinary(), s.driverEntry(), s.watch(), s.validate(), s.cdi(), s.nriInject(), s.nriReady())
	return root
}

func (s *shared) logger() (*logrus.Logger, error) { return s.global.Logger(os.Stderr) }

// host is the machine this process acts on, with the driver tree at
// driverRoot (a host path; empty = the installer's default): the real one,
// or in a test build the simulated one the test bed names (agenthost).
func (s *shared) host(driverRoot string) (host.Host, error) {
	if s.sim != nil {
		return s.sim, nil
	}
	l := host.NewLinux(s.hostRoot)
	l.NPUSMIPath = s.npuSMI
	if driverRoot != "" {
		l.DriverRoot = driverRoot
	}
	h, err := agenthost.Select(l)
	if err != nil {
		return nil, fmt.Errorf("choose the host: %w", err)
	}
	return h, nil
}

func keys(domain string) (contract.Keys, error) { return contract.NewKeys(domain) }

func (s *shared) installBinary() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "install-binary --to=DIR",
		Short: "Copy this executable into DIR (used to put npu-healthwatch into the vendor's driver image)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return errors.New("--to is required")
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this executable: %w", err)
			}
			dir := to
			// --to is a container path (an emptyDir), not a host path; a
			// simulated host still gets it so tests never write outside it.
			sim := s.sim
			if sim == nil {
				if sim, err = agenthost.Simulated(); err != nil {
					return fmt.Errorf("choose the host: %w", err)
				}
			}
			if sim != nil {
				dir = sim.Path(to)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("install-binary: %w", err)
			}
			dst := filepath.Join(dir, Name)
			if err := atomicfile.Copy(self, dst, 0o755); err != nil {
				return fmt.Errorf("install-binary: %w", err)
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "installed %s\n", dst)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "directory to copy the executable into")
	return cmd
}

func (s *shared) driverEntry() *cobra.Command {
	var (
		kc                                   kube.ClientOptions
		node, domain, version, root, markers string
		stops                                []string
		cfg                                  driverentry.Config
		leave                                leaveFlags
	)
	cmd := &cobra.Command{
		Use:   "driver-entry [flags] -- INSTALL-COMMAND...",
		Short: "Driver pod entry gate: install the driver on a fresh boot, never unload a running one, then idle",
		Long: "On a fresh boot (no driver loaded) runs the vendor install command and records the loaded version.\n" +
			"With the desired version loaded it only records it. With another version loaded it records that one and\n" +
			"idles Ready: chips do not survive unloading a driver. Once the rollout has drained the node and asks for\n" +
			"its reboot (driver-upgrade-state=reboot-required), it installs the desired version over the loaded one;\n" +
			"the rebooter waits for that install, and the reboot loads it.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := s.logger()
			if err != nil {
				return err
			}
			k, err := keys(domain)
			if err != nil {
				return err
			}
			if dash := cmd.ArgsLenAtDash(); dash > 0 {
				return fmt.Errorf("unexpected arguments %q before --: the install command goes after --", args[:dash])
			}
			client, _, err := kc.Client()
			if err != nil {
				return err
			}
			rec := kube.NewRecorder(client, Name)
			defer rec.Shutdown()
			h, err := s.host(root)
			if err != nil {
				return err
			}
			cfg.NodeName, cfg.Keys, cfg.DriverVersion, cfg.Namespace = node, k, version, os.Getenv("POD_NAMESPACE")
			cfg.DriverRoot, cfg.HostDriverRoot = h.Path(root), root
			cfg.Markers, cfg.InstallCommand = marker.Dir{Path: h.Path(markers)}, args
			if err := cfg.Validate(); err != nil {
				return err
			}
			pods := driverentry.DaemonSetPods{Client: client}
			for _, v := range stops {
				t, err := dstarget.Parse(v)
				if err != nil {
					return fmt.Errorf("--stop: %w", err)
				}
				pods.Targets = append(pods.Targets, t)
			}
			err = driverentry.Run(cmd.Context(), cfg, driverentry.Deps{
				Nodes: kube.Nodes{Client: client}, Watch: kube.NodeWatch{Client: client}, Host: h, Events: rec, Pods: pods, Clock: clock.RealClock{}, Log: log,
			})
			if err == nil {
				leave.leaver(client, rec, log, k, h, cfg.Namespace, node, markers).leave(cmd.Context())
			}
			return err
		},
	}
	f := cmd.Flags()
	kc.AddFlags(f, 5, 10)
	f.StringVar(&node, "node-name", "", "this node's name (downward API spec.nodeName)")
	f.StringVar(&domain, "label-domain", contract.DefaultDomain, "domain of the node-contract labels")
	f.StringVar(&version, "driver-version", "", "desired driver version")
	f.StringVar(&root, "driver-root", host.DefaultDriverRoot, "host directory of the driver tree (driver.hostDriverPath or the profile's hostDriverPath)")
	f.StringVar(&markers, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	f.StringVar(&cfg.Mode, "install-mode", drivertree.ModeRun, "run: run the vendor .run given after -- chrooted into the host; tree: copy the driver image's installed tree (--image-tree) into --driver-root and load its modules at every boot, for read-only roots such as KubeOS (driver.profiles[].installMode)")
	f.StringVar(&cfg.ImageTree, "image-tree", drivertree.DefaultImageTree, "tree mode: the installed driver tree inside the driver image (driver.imageTreePath)")
	f.DurationVar(&cfg.InstallTimeout, "install-timeout", driverentry.DefaultInstallTimeout, "stop an installer still running after this long and report it (driver.installTimeoutSeconds); SIGTERM never stops one sooner")
	f.DurationVar(&cfg.Retry.Initial, "retry-backoff", driverentry.DefaultBackoff.Initial, "wait before the first retry of a blocked or failed install; doubles at each retry")
	f.DurationVar(&cfg.Retry.Max, "retry-backoff-max", driverentry.DefaultBackoff.Max, "longest wait between two retries of a blocked or failed install")
	f.DurationVar(&cfg.HolderWait, "holder-wait", driverentry.DefaultHolderWait, "how long the stopped pods get to let go of the davinci device nodes before an install counts as blocked")
	leave.add(f)
	f.StringArrayVar(&stops, "stop", nil, "DaemonSet whose pods on this node are deleted before an install over the loaded driver: namespace/name or namespace/selector:<label selector> (repeatable; the chart passes its device plugin, exporter and driver.upgradePolicy.rerollTargets)")
	return cmd
}

func (s *shared) watch() *cobra.Command {
	var (
		kc          kube.ClientOptions
		cfg         health.Config
		domain      string
		driverRoot  string
		markers     string
		metricsAddr string
		pluginSel   string
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Probe the chips with npu-smi; mark the node wedged and ask for a recovery reboot, or clear a false alarm",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := s.logger()
			if err != nil {
				return err
			}
			if cfg.Keys, err = keys(domain); err != nil {
				return err
			}
			h, err := s.host(driverRoot)
			if err != nil {
				return err
			}
			cfg.Markers = marker.Dir{Path: h.Path(markers)}
			if err := cfg.Validate(); err != nil {
				return err
			}
			client, _, err := kc.Client()
			if err != nil {
				return err
			}
			rec := kube.NewRecorder(client, Name)
			defer rec.Shutdown()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			metrics := health.NewMetrics(reg)
			ctx := cmd.Context()
			if metricsAddr != "" {
				_, stop, err := serveMetrics(ctx, metricsAddr, reg, log)
				if err != nil {
					return err
				}
				defer stop()
			}
			deps := health.Deps{Nodes: kube.Nodes{Client: client}, Host: h, Clock: clock.RealClock{}, Events: rec, Metrics: metrics, Log: log}
			if pluginSel != "" {
				plugin, err := devicePlugin(pluginSel, os.Getenv("POD_NAMESPACE"))
				if err != nil {
					return err
				}
				plugin.Client = client
				deps.Plugin = plugin
			}
			w := health.NewWatcher(cfg, deps)
			return w.Run(ctx)
		},
	}
	f := cmd.Flags()
	kc.AddFlags(f, 5, 10)
	f.StringVar(&cfg.NodeName, "node-name", "", "this node's name (downward API spec.nodeName)")
	f.StringVar(&domain, "label-domain", contract.DefaultDomain, "domain of the node-contract labels")
	f.StringVar(&markers, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	f.StringVar(&driverRoot, "driver-root", host.DefaultDriverRoot, "host directory of the driver tree (its version.info, lib64 and tools/npu-smi)")
	f.DurationVar(&cfg.Interval, "probe-interval", time.Minute, "time between two probes")
	f.DurationVar(&cfg.Timeout, "probe-timeout", 30*time.Second, "a probe running longer fails (a hang is a failure)")
	f.IntVar(&cfg.Policy.FailureThreshold, "failure-threshold", 3, "consecutive failed probes before the node is marked wedged")
	f.IntVar(&cfg.Policy.RecoveryThreshold, "recovery-threshold", 3, "consecutive passing probes before a wedge is undone (its recovery request withdrawn)")
	f.IntVar(&cfg.LoopGuard.Max, "max-reboots", 3, "the rebooter's loop guard (--max-reboots of npu-rebooter): how many withdrawn wedges and failed reboots its history keeps")
	f.IntVar(&cfg.ExpectedChips, "expected-chips", 0, "chips npu-smi must show; 0 = as many as right after the driver loaded")
	f.StringVar(&metricsAddr, "metrics-addr", "", "address of the Prometheus metrics endpoint, such as :9403; empty = off")
	f.StringVar(&pluginSel, "device-plugin-selector", "", "label selector of the device-plugin pods (namespace: env POD_NAMESPACE); on a wedge the pod on this node is deleted, so its replacement waits for the driver and the NPU resources leave the scheduler; empty = off")
	return cmd
}

// devicePlugin checks --device-plugin-selector and the namespace it applies
// to; the client is filled in by the caller.
func devicePlugin(selector, namespace string) (health.DevicePlugin, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return health.DevicePlugin{}, fmt.Errorf("--device-plugin-selector %q: %w; want a label selector such as app.kubernetes.io/component=device-plugin", selector, err)
	}
	if sel.Empty() {
		return health.DevicePlugin{}, fmt.Errorf("--device-plugin-selector %q selects every pod; name the device plugin's labels", selector)
	}
	if namespace == "" {
		return health.DevicePlugin{}, errors.New("--device-plugin-selector needs the device plugin's namespace in env POD_NAMESPACE: set it from the downward API (metadata.namespace)")
	}
	return health.DevicePlugin{Namespace: namespace, Selector: sel}, nil
}

// serveMetrics serves /metrics on addr; it returns the address it listens
// on and a stop function that shuts the server down.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log logrus.FieldLogger) (string, func(), error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Listen first so that a taken port fails the command at start, not
	// silently later.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics endpoint %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("metrics endpoint stopped")
		}
	}()
	log.WithField("addr", ln.Addr().String()).Info("serving metrics")
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

func (s *shared) validate() *cobra.Command {
	var (
		cfg     validate.Config
		wait    bool
		timeout time.Duration
		poll    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check that the desired driver is loaded, npu-smi sees the chips and the driver-ready marker exists",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := s.logger()
			if err != nil {
				return err
			}
			h, err := s.host(cfg.DriverRoot)
			if err != nil {
				return err
			}
			c := validate.Checker{Config: cfg, Host: h}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if wait {
				return c.Wait(ctx, clock.RealClock{}, poll, log.WithField("node", cfg.NodeName))
			}
			if err := c.Check(ctx); err != nil {
				return err
			}
			if !cfg.MarkerOnly {
				log.WithField("node", cfg.NodeName).Info("NPU driver ready")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&wait, "wait", false, "block until every check passes (bounded by --timeout)")
	f.BoolVar(&cfg.MarkerOnly, "marker-only", false, "check only the driver-ready marker (readiness probe)")
	f.StringVar(&cfg.NodeName, "node-name", "", "this node's name, for messages")
	f.StringVar(&cfg.DriverRoot, "driver-root", "", "host directory of the driver tree that must exist; empty = not checked")
	f.StringVar(&cfg.MarkerDir, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	f.StringVar(&cfg.DriverVersion, "driver-version", "", "driver version that must be loaded; empty = any")
	f.BoolVar(&cfg.RequireInjector, "require-injector", false, "also require the NRI injector's registration (the device plugin's gate with cdi.inject)")
	f.BoolVar(&cfg.RequireMarker, "require-marker", true, "require the driver-ready marker (false for a pre-installed driver without driver pod)")
	f.DurationVar(&cfg.SMITimeout, "npu-smi-timeout", 30*time.Second, "npu-smi running longer fails the chip check")
	f.DurationVar(&timeout, "timeout", 0, "give up after this long; 0 = never (the pod's deadline bounds it)")
	f.DurationVar(&poll, "poll-interval", 2*time.Second, "with --wait, re-check this often besides on marker changes")
	return cmd
}
