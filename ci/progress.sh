#!/usr/bin/env bash
# Progress of the long builds (control plane, real nodes' binaries,
# deployers, the demo program): a first run compiles Kubernetes and
# friends for many minutes, and a build that prints nothing for that long
# looks hung. `step` prints what it builds as step n of m, a line at least
# every PROGRESS_EVERY seconds (default 30) while it runs, and its time
# when it ends; not `go build -v`, whose hundreds of package names say
# nothing about how far along a build is.
#
# Sourced: `source ci/progress.sh; step 2 4 "building etcd" go build ...`.
# Run: `bash ci/progress.sh 1 1 "building npu-demo" go build ...` (the
# Makefile's demo program).
set -euo pipefail

# duration prints a number of seconds as "1 min 5 s" or "42 s".
duration() {
	local s=$1
	if ((s >= 60)); then
		echo "$((s / 60)) min $((s % 60)) s"
	else
		echo "$s s"
	fi
}

# step N M WHAT CMD...: runs CMD as step N of M, named WHAT.
step() {
	local n=$1 m=$2 what=$3
	shift 3
	local start=$SECONDS every=${PROGRESS_EVERY:-30}
	echo "[$n/$m] $what"
	# The heartbeat stops with the step, and also when this shell dies
	# without stopping it (kill -0 $$ fails): a killed build must not leave
	# a process printing into the terminal. Its sleep holds no copy of
	# stdout, so a caller reading our output to EOF (go test's
	# CombinedOutput, a pipe) never waits for a sleep to end.
	(
		trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
		sleeper=
		while kill -0 $$ 2>/dev/null; do
			sleep "$every" </dev/null >/dev/null 2>&1 &
			sleeper=$!
			wait "$sleeper" || true
			echo "[$n/$m] $what: still running, $(duration $((SECONDS - start)))"
		done
	) &
	local beat=$! rc=0
	"$@" || rc=$?
	kill "$beat" 2>/dev/null || true
	wait "$beat" 2>/dev/null || true
	if ((rc != 0)); then
		echo "[$n/$m] $what: FAILED after $(duration $((SECONDS - start)))" >&2
		return "$rc"
	fi
	echo "[$n/$m] $what: done in $(duration $((SECONDS - start)))"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	if (($# < 4)); then
		echo "usage: $0 N M WHAT CMD..." >&2
		exit 2
	fi
	step "$@"
fi
