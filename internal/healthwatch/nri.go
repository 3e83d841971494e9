package healthwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/internal/nriinject"
)

// nriInject runs the NRI injector (internal/nriinject): every container
// allocated chips gets the driver's user space from the node's CDI spec.
func (s *shared) nriInject() *cobra.Command {
	var (
		p         nriinject.Plugin
		socket    string
		markerDir string
		domain    string
		kc        kube.ClientOptions
	)
	cmd := &cobra.Command{
		Use:   "nri-inject",
		Short: "Give every container allocated NPU chips their driver user space from the node's CDI spec, through the container runtime's NRI",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := s.logger()
			if err != nil {
				return err
			}
			if p.Node == "" {
				return errors.New("--node-name is required (the chart passes $(NODE_NAME))")
			}
			if p.SpecFile == "" {
				return errors.New("--cdi-spec is required, such as /var/run/cdi/huawei-com-npu.yaml")
			}
			h, err := s.host("")
			if err != nil {
				return err
			}
			k, err := keys(domain)
			if err != nil {
				return err
			}
			client, _, err := kc.Client()
			if err != nil {
				return err
			}
			rec := kube.NewRecorder(client, Name)
			defer rec.Shutdown()
			p.MarkerDir = markerDir
			p.HostPath = h.Path
			p.Log = log.WithField("node", p.Node)
			report := nodeReport{node: p.Node, keys: k, nodes: kube.Nodes{Client: client}, events: rec, log: p.Log}
			return nriinject.Run(cmd.Context(), &p, socket, marker.Dir{Path: h.Path(markerDir)}, report)
		},
	}
	f := cmd.Flags()
	kc.AddFlags(f, 5, 10)
	f.StringVar(&domain, "label-domain", contract.DefaultDomain, "domain of the node-contract keys (the injection-status annotation)")
	f.StringVar(&p.Node, "node-name", "", "this node's name: its Node gets the NRIUnavailable event and the injection-status annotation")
	f.StringVar(&p.SpecFile, "cdi-spec", "", "host path of the node's CDI spec (cdi generate --output)")
	f.StringVar(&markerDir, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	f.BoolVar(&p.RequireMarker, "require-marker", true, "refuse chip containers while the driver-ready marker is absent or names another version than the spec (false for a pre-installed driver without driver pod)")
	f.StringVar(&p.Own.Namespace, "own-namespace", "", "namespace of the chart's own pods, left as written")
	f.StringVar(&p.Own.Instance, "own-instance", "", "their app.kubernetes.io/instance label (the release); empty = every pod of --own-namespace")
	f.StringVar(&socket, "nri-socket", "/var/run/nri/nri.sock", "host path of the runtime's NRI socket (containerd's plugins.\"io.containerd.nri.v1.nri\".socket_path)")
	return cmd
}

// nriReady exits 0 while the injector is registered with the runtime
// (and alive: marker.Dir.Injector). The injector's readiness probe and
// the device plugin's startup and liveness probes run it; with --wait
// the device plugin's command waits on it before the plugin starts.
func (s *shared) nriReady() *cobra.Command {
	var (
		markerDir string
		wait      bool
	)
	cmd := &cobra.Command{
		Use:   "nri-ready",
		Short: "Succeed when the NRI injector is registered with the container runtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := s.host("")
			if err != nil {
				return err
			}
			d := marker.Dir{Path: h.Path(markerDir)}
			if wait {
				return waitInjector(cmd.Context(), d, markerDir, cmd.ErrOrStderr())
			}
			_, ok, err := d.Injector()
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("the NRI injector is not registered (no live record in %s): see the log of this node's npu-stack nri-injector pod and the Node's NRIUnavailable events", markerDir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&markerDir, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the injector is registered instead of failing, saying every 30 s what is awaited")
	return cmd
}

// waitInjector returns once d records a live injector. It re-checks at
// each change of the directory and every second (a killed injector
// changes no file), and says every 30 s what it waits for.
func waitInjector(ctx context.Context, d marker.Dir, hostDir string, out io.Writer) error {
	changes, err := d.Changes(ctx)
	if err != nil {
		changes = nil // the directory is not there yet: the ticker polls
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start, said := time.Now(), time.Now()
	for {
		_, ok, err := d.Injector()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Since(said) >= 30*time.Second {
			said = time.Now()
			_, _ = fmt.Fprintf(out, "waiting %s for the NRI injector to register (record in %s): see the log of this node's npu-stack nri-injector pod\n", time.Since(start).Round(time.Second), hostDir)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the NRI injector did not register: %w", ctx.Err())
		case <-changes:
		case <-tick.C:
		}
	}
}
