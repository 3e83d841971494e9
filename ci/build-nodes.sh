#!/usr/bin/env bash
# Builds what a real test-bed node runs (tests/testbed/realnode) from the Go
# module proxy into a gitignored cache, like the control plane:
#   - kubelet, from ci/nodes/kubelet: ci/controlplane's module set (the
#     control plane's Kubernetes version, same replaces) plus the packages
#     only the kubelet imports;
#   - containerd and containerd-shim-runc-v2, the CNI plugins bridge,
#     host-local, loopback and portmap, and crictl, from ci/nodes;
#   - pause, the sandbox image's program, from k8s.io/kubernetes's
#     build/pause at the kubelet's version;
#   - runc, from ci/nodes/runc: a module of its own because the CNI plugins
#     require a newer runc library than the runc release we run.
# A stamp of the pinned module files and the Go version makes a second run
# a no-op.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${NPU_STACK_NODES_DIR:-$root/.cache/nodes}
kube_version=v1.37.1
containerd_version=v2.4.2
runc_version=v1.3.3
crictl_version=v1.37.0

stamp_input() {
	go version
	cat "$0"
	echo "$kube_version $containerd_version $runc_version $crictl_version"
	cat "$root"/ci/nodes/kubelet/go.mod "$root"/ci/nodes/kubelet/go.sum \
		"$root"/ci/nodes/go.mod "$root"/ci/nodes/go.sum \
		"$root"/ci/nodes/runc/go.mod "$root"/ci/nodes/runc/go.sum
}
want=$(stamp_input | sha256sum | cut -d' ' -f1)
if [[ -f $out/stamp && $(cat "$out/stamp") == "$want" ]]; then
	echo "node binaries up to date in $out"
	exit 0
fi
# runc (cgo against libseccomp) and pause (static C) need gcc, libc6-dev,
# libseccomp-dev and pkg-config: ci/prereqs.sh installs them as root on
# Debian and otherwise names the command that does, before the first
# minute-long build rather than after it.
bash "$root/ci/prereqs.sh" nodes

# shellcheck source=ci/progress.sh
source "$root/ci/progress.sh"
mkdir -p "$out/bin" "$out/cni"
rm -f "$out/stamp"
minor=${kube_version#v1.}
minor=${minor%%.*}
start=$SECONDS
echo "building the real nodes' binaries into $out, once: about 4 min 30 s on 2 cores with cold Go caches"
# Each build in a subshell function: step runs it while it prints.
build_kubelet() (cd "$root/ci/nodes/kubelet" && go build -trimpath -ldflags "-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z" \
	-o "$out/bin/" k8s.io/kubernetes/cmd/kubelet)
# The tags leave out the snapshotters that need cgo or host tools (as
# containerd's own static release builds do); overlayfs and native stay.
build_containerd() (cd "$root/ci/nodes" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
	-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
	-o "$out/bin/" github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
build_crictl() (cd "$root/ci/nodes" && CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" \
	-o "$out/bin/" sigs.k8s.io/cri-tools/cmd/crictl)
build_cni() (cd "$root/ci/nodes" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/cni/" \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap)
# cgo with -tags seccomp, as runc's Makefile builds it: containerd's CRI
# hands runc the default seccomp profile, which a build without the tag
# cannot load.
build_runc() (cd "$root/ci/nodes/runc" && CGO_ENABLED=1 go build -trimpath -tags "seccomp urfave_cli_no_docs" \
	-ldflags "-s -w -X main.version=${runc_version#v}" \
	-o "$out/bin/" github.com/opencontainers/runc)
# The sandbox ("pause") image's program: upstream's pause.c at the
# kubelet's Kubernetes version, built as its Makefile does (static, -Os).
# The test bed pushes it as an image; nothing here can pull
# registry.k8s.io/pause.
pause_src=$(cd "$root/ci/nodes/kubelet" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause
pause_tag=$(sed -n 's/^TAG ?= //p' "$pause_src/Makefile")
build_pause() { gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag-npu-stack" -o "$out/bin/pause" "$pause_src/linux/pause.c"; }
step 1 6 "kubelet $kube_version" build_kubelet
step 2 6 "containerd $containerd_version and containerd-shim-runc-v2" build_containerd
step 3 6 "crictl $crictl_version" build_crictl
step 4 6 "the CNI plugins bridge, host-local, loopback, portmap" build_cni
step 5 6 "runc $runc_version (cgo, libseccomp)" build_runc
step 6 6 "pause $pause_tag (gcc, static)" build_pause
echo "$pause_tag" > "$out/pause-version"
echo "$want" > "$out/stamp"
echo "node binaries ready in $out ($(duration $((SECONDS - start))))"
