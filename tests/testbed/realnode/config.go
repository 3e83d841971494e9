package realnode

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/nodepaths"
)

// Paths inside the node.
const (
	// BinDir holds the node's kubelet, containerd, shim, runc and crictl
	// (a read-only bind of the test bed's build).
	BinDir            = nodepaths.BinDir
	cniBinDir         = "/opt/cni/bin"
	containerdSock    = "/run/containerd/containerd.sock"
	containerdConfig  = "/etc/containerd/config.toml"
	kubeletConfig     = "/etc/kubernetes/kubelet-config.yaml"
	kubeletKubeconfig = "/etc/kubernetes/kubelet.conf"
	pkiDir            = "/etc/kubernetes/pki"
	// StaticPodDir is the kubelet's static pod path.
	StaticPodDir = "/etc/kubernetes/manifests"
	// LogDir holds containerd.log and kubelet.log (the node's /var/log).
	LogDir = "/var/log"
	// nodePath is PATH for the node's daemons and for commands run in it.
	nodePath = BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// writeNodeFiles writes the node's configuration into the upper layer of
// its /etc overlay (etcUpper) before the node starts: the files shadow the
// host's /etc only inside the node.
func (n *Node) writeNodeFiles(etcUpper string) error {
	c := n.cfg
	// The machine ID is made once, at first boot, and kept, as systemd
	// keeps /etc/machine-id.
	machineID := make([]byte, 16)
	if _, err := rand.Read(machineID); err != nil {
		return fmt.Errorf("node %s: machine id: %w", c.Name, err)
	}
	mid := []byte(hex.EncodeToString(machineID) + "\n")
	// (The upper layer: the merged /etc shows the host's below it.)
	if old, err := os.ReadFile(filepath.Join(c.Dir, dirUpper, "etc", "machine-id")); err == nil && len(old) > 0 {
		mid = old
	}
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return fmt.Errorf("node %s: the host's resolv.conf: %w", c.Name, err)
	}
	files := map[string][]byte{
		"hostname":   []byte(c.Name + "\n"),
		"machine-id": mid,
		// A copy, not the host's file through the overlay: the host's may
		// be a symlink into its /run, which the node does not share.
		"resolv.conf": resolv,
		"hosts":       fmt.Appendf(nil, "127.0.0.1 localhost\n%s %s\n", n.net.nodeIP, c.Name),
		"crictl.yaml": []byte("runtime-endpoint: unix://" + containerdSock + "\nimage-endpoint: unix://" + containerdSock + "\ntimeout: 30\n"),
		strings.TrimPrefix(containerdConfig, "/etc/"):               n.containerdConfig(),
		"containerd/certs.d/" + c.Registry + "/hosts.toml":          registryHosts(c.Registry),
		"cni/net.d/10-npu-stack.conflist":                           cniConfig(c.PodCIDR),
		strings.TrimPrefix(kubeletConfig, "/etc/"):                  n.kubeletConfig(),
		strings.TrimPrefix(kubeletKubeconfig, "/etc/"):              n.kubeconfig(),
		strings.TrimPrefix(pkiDir, "/etc/") + "/ca.crt":             c.CAPEM,
		strings.TrimPrefix(pkiDir, "/etc/") + "/kubelet-client.crt": c.CertPEM,
		strings.TrimPrefix(pkiDir, "/etc/") + "/kubelet-client.key": c.KeyPEM,
		strings.TrimPrefix(StaticPodDir, "/etc/") + "/.keep":        nil,
		"cdi/.keep": nil,
	}
	for rel, data := range files {
		p := filepath.Join(etcUpper, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", c.Name, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".key") {
			mode = 0o600
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return fmt.Errorf("node %s: %w", c.Name, err)
		}
	}
	return nil
}

// containerdConfig is containerd 2.4's config (version 4: server settings
// such as the socket live in server plugins; the default socket is
// /run/containerd/containerd.sock) with its CRI plugin. CDI is always on in containerd 2.x (plugins/cri/runtime/plugin.go
// drops the old enable_cdi key: "CDI is always enabled"); the spec
// directories are its defaults, spelled out.
func (n *Node) containerdConfig() []byte {
	return fmt.Appendf(nil, `version = 4
root = "/var/lib/containerd"
state = "/run/containerd"

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    # Nothing here can pull registry.k8s.io: the sandbox image is the
    # upstream pause program, pushed to the test bed's registry.
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "/etc/containerd/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  # The test machine lacks CAP_SYS_RESOURCE: a sandbox's oom_score_adj of
  # -998 would be refused; clamp to containerd's own instead.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        # The test bed's runc wrapper (realnode/runcwrap): runc, plus
        # the node's boot ID in every container.
        BinaryName = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = "/etc/cni/net.d"
`, n.cfg.SandboxImage, nodepaths.RuncWrapper, cniBinDir)
}

// registryHosts makes containerd speak plain HTTP to the test bed's
// loopback registry, which the node reaches through its forwarder.
func registryHosts(registry string) []byte {
	return fmt.Appendf(nil, "server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", registry, registry)
}

// cniConfig is a bridge network for the node's pods. No portmap or IP
// masquerade: both need iptables, which the test machine lacks, and pods
// only reach the API server, whose address the node itself serves.
func cniConfig(podCIDR string) []byte {
	return fmt.Appendf(nil, `{
  "cniVersion": "1.0.0",
  "name": "npu-stack-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, podCIDR)
}

// kubeletConfig is the kubelet's KubeletConfiguration.
func (n *Node) kubeletConfig() []byte {
	return fmt.Appendf(nil, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The test machine runs cgroup v1 (hybrid); Kubernetes 1.37 still runs on it
# when told to.
failCgroupV1: false
cgroupDriver: cgroupfs
# Each node's pods under a cgroup of their own, removed when the node stops.
cgroupRoot: %q
containerRuntimeEndpoint: unix://%s
staticPodPath: %s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s/ca.crt
authorization:
  mode: Webhook
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
failSwapOn: false
# Lowering its own oom_score_adj needs CAP_SYS_RESOURCE.
oomScoreAdj: 0
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Graceful node shutdown: the kubelet takes a delay inhibitor lock of the
# node's logind (the stand-in of logind.go) and, when logind announces a
# shutdown, stops the pods (critical ones last) before it lets go. 5s is
# logind's default InhibitDelayMaxSec, so the kubelet needs no logind.conf
# override (k8s.io/kubernetes v1.37.1 pkg/kubelet/nodeshutdown
# nodeshutdown_manager_linux.go start).
shutdownGracePeriod: 5s
shutdownGracePeriodCriticalPods: 2s
# The disk is shared with the host and other nodes: evict only when it is
# really full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
`, n.cgroupRoot(), containerdSock, StaticPodDir, pkiDir)
}

// kubeconfig is the kubelet's: the API server through the node's
// loopback forwarder, as the user system:node:<name>.
func (n *Node) kubeconfig() []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: %s
    certificate-authority: %s/ca.crt
users:
- name: %s
  user:
    client-certificate: %s/kubelet-client.crt
    client-key: %s/kubelet-client.key
contexts:
- name: node
  context:
    cluster: testbed
    user: %s
current-context: node
`, n.cfg.APIServer, pkiDir, UserName(n.cfg.Name), pkiDir, pkiDir, UserName(n.cfg.Name))
}

// UserName is the Kubernetes user of node's kubelet, as the Node
// authorizer expects it (group system:nodes).
func UserName(node string) string { return "system:node:" + node }

// labelFlag is the kubelet's --node-labels value, sorted.
func labelFlag(labels map[string]string) string {
	var kv []string
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}
