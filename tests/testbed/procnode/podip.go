package procnode

import (
	"regexp"
)

// A real pod has a network namespace of its own: two pods may listen on
// the same port. A process node's pods are processes of one host, so two
// nodes' agents listening on :9402 would collide, and the test bed turns
// their metrics off. With Config.PodIP set, a node stands for that
// address its pods' own: a listening flag on every interface
// ("--metrics-addr=:9402") is bound to PodIP instead, and PodIP is the
// pods' status.podIP, where Prometheus (file_sd from the pods) scrapes
// them. Loopback addresses other than 127.0.0.1 (127.0.x.y) need no setup
// on Linux.

// listenFlag matches a flag naming an address to listen on, with no host.
var listenFlag = regexp.MustCompile(`^(--[a-z][a-z-]*-addr(ess)?)=:([0-9]+)$`)

// bindPodIP rewrites the listening flags of args to ip; ip "" leaves args
// as they are, and nil (a simulated container) stays nil.
func bindPodIP(args []string, ip string) []string {
	if ip == "" || args == nil {
		return args
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = listenFlag.ReplaceAllString(a, "${1}="+ip+":${3}")
	}
	return out
}

// podIP is the address of the node's pods.
func (n *Node) podIP() string {
	if n.cfg.PodIP != "" {
		return n.cfg.PodIP
	}
	return nodeIP
}
