#!/usr/bin/env bash
# What `make demo`, `make test`, `make nodes` and CI (.ci/run) need from
# the machine besides Go, checked in the first second, before any
# minute-long build: a newcomer's `make demo` once failed after 19
# minutes on a missing libseccomp-dev.
#
# As root on a Debian-family machine (apt-get) it installs the missing
# Debian packages itself and says which and why, as CI does on its fresh
# machine. Anywhere else (not root, no apt-get, or --check) it installs
# nothing: it names each missing prerequisite, why it is needed and the
# exact command that fixes it, and fails.
#
# usage: ci/prereqs.sh [--check] demo|test|nodes|ci
#   demo   make demo: the real 910B and 310P nodes unless DEMO_REAL_NODES=0
#   test   make test: every test, real nodes and the deployers included
#   nodes  make nodes: building the real nodes' binaries
#   ci     .ci/run: make test's, plus make itself
#   --check  report only, never install
set -euo pipefail

usage() {
	echo "usage: $0 [--check] demo|test|nodes|ci" >&2
	exit 2
}
check_only=0
if [[ ${1:-} == --check ]]; then
	check_only=1
	shift
fi
(($# == 1)) || usage
target=$1
case $target in
demo | test | nodes | ci) ;;
*) usage ;;
esac
what="make $target"
[[ $target == ci ]] && what=".ci/run"

# What this target does on this machine: build the real nodes' binaries,
# run real nodes, run the whole test suite.
build_nodes=0 real_nodes=0 suite=0
case $target in
nodes) build_nodes=1 ;;
demo)
	if [[ ${DEMO_REAL_NODES:-1} != 0 ]]; then
		build_nodes=1 real_nodes=1
	fi
	;;
test | ci) build_nodes=1 real_nodes=1 suite=1 ;;
esac

packages=() # missing Debian packages, in order, each once
reasons=()  # one line per missing prerequisite
problems=() # what no package fixes
missing() { # missing "WHY" PACKAGE...
	local why=$1 p have q
	shift
	reasons+=("$* ($why)")
	for p in "$@"; do
		have=0
		for q in "${packages[@]}"; do
			[[ $q == "$p" ]] && have=1
		done
		((have)) || packages+=("$p")
	done
}
has() { command -v "$1" >/dev/null 2>&1; }

if ! has go; then
	problems+=("Go 1.26 is not on PATH: unpack go1.26.<patch>.linux-<amd64|arm64>.tar.gz from https://go.dev/dl/ with tar -C /usr/local -xzf, then: export PATH=/usr/local/go/bin:\$PATH")
fi
if [[ $target == ci ]]; then
	has make || missing ".ci/run's every step is a make target" make
fi
if ((build_nodes)); then
	# runc is built with cgo against libseccomp (containerd's CRI hands it
	# a seccomp profile), and the sandbox image's pause is C linked
	# statically against glibc (libc.a is libc6-dev's).
	if ! has gcc; then
		missing "runc is cgo and pause is C, both compiled by gcc" gcc libc6-dev
	elif [[ ! -f $(gcc -print-file-name=libc.a) ]]; then
		missing "pause links glibc statically: libc.a" libc6-dev
	fi
	pkg-config --exists libseccomp 2>/dev/null || missing "runc's seccomp support: libseccomp's headers, found with pkg-config" libseccomp-dev pkg-config
fi
if ((real_nodes)); then
	# A real node's veth is set up with iproute2's ip; its processes start
	# in its namespaces with util-linux's nsenter; it runs Debian's
	# dbus-daemon --system for the rebooter's reboot over D-Bus.
	has ip || missing "real nodes' network: ip link" iproute2
	has nsenter || missing "real nodes' namespaces: nsenter" util-linux
	{ [[ -x /usr/bin/dbus-daemon ]] && [[ -f /usr/share/dbus-1/system.conf ]]; } || missing "real nodes' system bus: /usr/bin/dbus-daemon and /usr/share/dbus-1/system.conf" dbus
	# A process that joins a mount namespace (runc exec: every exec probe)
	# is put at the namespace's root mount. In a chroot that is the
	# host's /, not this root, and the real nodes' exec probes fail; in a
	# chroot into a plain directory each node's mount --make-rprivate /
	# fails too. The root must be the namespace's own (pivot_root, as a
	# container or systemd-nspawn does).
	if ((EUID == 0)) && has nsenter && [[ -e /proc/self/ns/mnt ]]; then
		here=$(stat -c %d:%i /)
		nsroot=$(nsenter --mount=/proc/self/ns/mnt -- stat -c %d:%i / 2>/dev/null || echo "$here")
		if [[ $here != "$nsroot" ]]; then
			problems+=("the real nodes need / to be the root of this mount namespace, and here it is not (a chroot?): processes that join a namespace, such as the containers' exec probes, would land in the host's /. Enter the root as a machine: unshare --mount, bind-mount the root onto itself (mount --bind ROOT ROOT), pivot_root into it (or systemd-nspawn -D ROOT); or run make demo DEMO_REAL_NODES=0")
		fi
	fi
	if ((EUID != 0)); then
		if [[ $target == demo ]]; then
			problems+=("the demo's real 910B and 310P nodes (kubelet, containerd, runc in namespaces, mounts, veths and cgroups of their own) need root: run sudo env \"PATH=\$PATH\" make demo, or make demo DEMO_REAL_NODES=0 for the simulated nodes alone, which needs no root")
		else
			problems+=("the real-node tests (tests/realnode) need root for namespaces, mounts, veths and cgroups: run sudo env \"PATH=\$PATH\" $what")
		fi
	fi
fi
if ((suite)); then
	# The rebooter's D-Bus reboot is also tested against a real
	# dbus-daemon called with dbus-send; Argo CD's cache in the deployer
	# tests is a real redis; git serves the Argo CD values-from-Git story
	# (git http-backend); the real-node tests fetch metrics with curl;
	# ci/test.sh holds the background build's lock with flock.
	has dbus-send || missing "the rebooter's D-Bus tests call dbus-send" dbus
	has redis-server || missing "Argo CD's cache in the deployer tests" redis-server
	has git || missing "the Argo CD values-from-Git story serves a repository with git http-backend" git
	has curl || missing "the real-node tests fetch metrics with curl" curl
	has flock || missing "ci/test.sh holds its background build's lock with flock" util-linux
fi

if ((${#packages[@]} == 0 && ${#problems[@]} == 0)); then
	echo "prerequisites of $what: present ($(go env GOVERSION 2>/dev/null || echo go))"
	exit 0
fi

if ((${#packages[@]})) && ((!check_only)) && ((EUID == 0)) && has apt-get; then
	echo "$what: installing the Debian packages it needs:"
	printf '  %s\n' "${reasons[@]}"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}"
	# Checked again: what the packages did not fix (Go, root) is said now.
	exec bash "$0" --check "$target"
fi

{
	echo "$what cannot run on this machine yet (checked by ci/prereqs.sh before any build):"
	if ((${#packages[@]})); then
		echo "missing:"
		printf '  %s\n' "${reasons[@]}"
		sudo=""
		((EUID == 0)) || sudo="sudo "
		echo "fix: ${sudo}apt-get install ${packages[*]}"
		has apt-get || echo "  (Debian package names: this machine has no apt-get; install your distribution's equivalents)"
	fi
	for p in "${problems[@]}"; do
		echo "$p"
	done
} >&2
exit 1
