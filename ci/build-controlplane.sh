#!/usr/bin/env bash
# Builds the local test control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) from the Go module
# proxy into a gitignored cache. A stamp of the pinned module files and the Go
# version makes a second run a no-op: the Kubernetes build takes minutes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${NPU_STACK_CP_DIR:-$root/.cache/controlplane}
kube_version=v1.37.1

stamp_input() {
	go version
	echo "$kube_version"
	cat "$root"/ci/controlplane/go.mod "$root"/ci/controlplane/go.sum \
		"$root"/ci/etcd/go.mod "$root"/ci/etcd/go.sum \
		"$root"/ci/kwok/go.mod "$root"/ci/kwok/go.sum \
		"$root"/ci/registry/go.mod "$root"/ci/registry/go.sum
}
want=$(stamp_input | sha256sum | cut -d' ' -f1)
if [[ -f $out/stamp && $(cat "$out/stamp") == "$want" ]]; then
	echo "control plane binaries up to date in $out"
	exit 0
fi

mkdir -p "$out/bin"
rm -f "$out/stamp"
minor=${kube_version#v1.}
minor=${minor%%.*}
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"

# shellcheck source=ci/progress.sh
source "$root/ci/progress.sh"
start=$SECONDS
echo "building the Kubernetes $kube_version control plane into $out/bin, once: about 19 min on 2 cores with cold Go caches (kube-apiserver and the other three take most of it), a few minutes with warm ones"
# Each build in a subshell function: step runs it while it prints.
build_kube() (cd "$root/ci/controlplane" && go build -trimpath -ldflags "$ldflags" -o "$out/bin/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubectl)
build_etcd() (cd "$root/ci/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" go.etcd.io/etcd/server/v3)
build_kwok() (cd "$root/ci/kwok" && go build -trimpath -ldflags "-s -w" -o "$out/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
# The test bed's OCI registry: CNCF distribution, the registry most
# private and air-gapped mirrors run.
build_registry() (cd "$root/ci/registry" && go build -trimpath -ldflags "-s -w" -o "$out/bin/registry" github.com/distribution/distribution/v3/cmd/registry)
step 1 4 "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $kube_version" build_kube
step 2 4 "etcd" build_etcd
step 3 4 "kwok" build_kwok
step 4 4 "the distribution registry" build_registry
# KWOK needs its lifecycle stages as config; take the upstream "fast" node
# and pod stages plus lease heartbeats from the pinned module.
kwok_dir=$(cd "$root/ci/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
	cat "$kwok_dir/kustomize/stage/$f"
	echo "---"
done > "$out/kwok-stages.yaml"
echo "$want" > "$out/stamp"
echo "control plane binaries ready in $out/bin ($(duration $((SECONDS - start))))"
