// Package kube builds the Kubernetes clients and event recorders the
// npu-stack binaries share, and the small node-patching helpers that keep
// their writes conflict-free (JSON merge patches of single keys, never
// read-modify-write of a whole Node).
package kube

import (
	"fmt"
	"net/http"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientOptions are the connection flags of every binary.
type ClientOptions struct {
	Kubeconfig string
	// QPS and Burst are sized for thousands of nodes: the rollout patches
	// several nodes per second at peak, and client-go's default of 5 QPS
	// would be the bottleneck, not the cluster.
	QPS   float32
	Burst int
	// WrapTransport, if set, wraps the transport of every client built
	// from these options (`npu-hooks rollout --profile-dir` times the
	// requests with it); not a flag.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst.
func (o *ClientOptions) AddFlags(fs *pflag.FlagSet, defaultQPS float32, defaultBurst int) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, then the in-cluster service account")
	fs.Float32Var(&o.QPS, "kube-api-qps", defaultQPS, "maximum sustained requests per second to the API server")
	fs.IntVar(&o.Burst, "kube-api-burst", defaultBurst, "maximum burst of requests to the API server")
}

// RESTConfig resolves the flags, $KUBECONFIG and the in-cluster config, in
// that order, like kubectl.
func (o *ClientOptions) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client config (set --kubeconfig or run in a pod): %w", err)
	}
	if o.QPS > 0 {
		cfg.QPS = o.QPS
	}
	if o.Burst > 0 {
		cfg.Burst = o.Burst
	}
	if o.WrapTransport != nil {
		cfg.Wrap(o.WrapTransport)
	}
	return cfg, nil
}

// Client builds a clientset from the flags.
func (o *ClientOptions) Client() (kubernetes.Interface, *rest.Config, error) {
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	// Built-in types travel as protobuf, as with the control plane's own
	// components: decoding costs a fraction of JSON's CPU and garbage,
	// which counts for the rollout's watch of every pod of the cluster.
	// cfg itself stays JSON for clients of other types.
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c, err := kubernetes.NewForConfig(pb)
	if err != nil {
		return nil, nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	return c, cfg, nil
}
