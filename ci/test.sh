#!/usr/bin/env bash
# make test: `go test` starts at once while the deployers (.cache/engines)
# and then the real nodes' binaries (.cache/nodes) build in the
# background. A test that needs one of them waits for that build at its
# first use: this script holds an exclusive flock on
# $NPU_STACK_BUILD_DIR/build-<engines|nodes>.lock until that build ends,
# and testbed.EnginesDir/NodesDir take a shared one. So on a cold machine
# the packages that only need the control plane (rollout, reboot, health,
# ...: most of their time is waiting) run while the CPU builds, and
# tests/e2e, the longest, starts on the deployers without waiting for the
# nodes' binaries.
# Usage: ci/test.sh CACHE_DIR GO_TEST_ARGS...
set -euo pipefail
mkdir -p "$1"
# Absolute: each test binary runs in its own package's directory.
cache=$(cd "$1" && pwd)
shift
rm -f "$cache"/build-engines.rc "$cache"/build-nodes.rc
exec 8>"$cache/build-engines.lock" 9>"$cache/build-nodes.lock"
flock -x 8
flock -x 9
# The subshell inherits fds 8 and 9: each lock lives until its build has
# written its exit code; the shell below closes its own copies before
# `go test`.
(
	for what in engines nodes; do
		rc=0
		"${MAKE:-make}" --no-print-directory "$what" >"$cache/build-$what.log" 2>&1 || rc=$?
		echo "$rc" >"$cache/build-$what.rc"
		if [[ $what == engines ]]; then exec 8>&-; else exec 9>&-; fi
	done
) &
builder=$!
exec 8>&- 9>&-
echo "building the deployers, then the real nodes' binaries, in the background (logs: $cache/build-engines.log, $cache/build-nodes.log); the tests that need them wait for them"
export NPU_STACK_BUILD_DIR=$cache

# Progress: go test prints a package's result only when the package
# ends, and in the order it was given the packages (tests/e2e, first,
# runs for over 20 minutes), and the background builds write to their
# logs, so without this a run looks hung for most of an hour. A line
# every PROGRESS_EVERY seconds (default 30): the time so far, the
# packages reported out of all, the test binaries running now, and each
# background build's step.
# shellcheck source=ci/progress.sh
source "$(dirname "$0")/progress.sh"
: >"$cache/test.log"
build_step() {
	local what=$1
	if [[ -f $cache/build-$what.rc ]]; then
		if [[ $(cat "$cache/build-$what.rc") == 0 ]]; then echo "$what built"; else echo "$what build FAILED"; fi
	elif [[ -s $cache/build-$what.log ]]; then
		echo "$what $(grep -E '^\[[0-9]+/[0-9]+\]' "$cache/build-$what.log" | tail -n 1 | sed -E 's/: (still running|done in) .*//')"
	else
		echo "$what waiting"
	fi
}
# running names the test binaries of this run (its process group)
# running now, from /proc: a minimal Debian root has no ps.
running() {
	local own stat comm rest pgrp names=()
	stat=$(<"/proc/$$/stat")
	read -r _ _ own _ <<<"${stat##*) }"
	for f in /proc/[0-9]*/stat; do
		# a process may end between the glob and the read
		{ stat=$(<"$f"); } 2>/dev/null || continue
		comm=${stat#*(}
		comm=${comm%)*}
		rest=${stat##*) }
		read -r _ _ pgrp _ <<<"$rest"
		if [[ $pgrp == "$own" && $comm == *.test ]]; then
			names+=("${comm%.test}")
		fi
	done
	if ((${#names[@]} == 0)); then
		echo none
	else
		printf '%s\n' "${names[@]}" | sort | paste -sd' ' -
	fi
}
start=$SECONDS
(
	trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
	sleeper=
	total=$("${GO:-go}" list ./... 2>/dev/null | wc -l)
	while kill -0 $$ 2>/dev/null; do
		sleep "${PROGRESS_EVERY:-30}" </dev/null >/dev/null 2>&1 &
		sleeper=$!
		wait "$sleeper" || true
		done=$(grep -cE '^(ok|FAIL|\?)[[:space:]]+[^[:space:]]' "$cache/test.log" || true)
		echo "make test: $(duration $((SECONDS - start))), test packages reported: $done of $total; running: $(running); $(build_step engines); $(build_step nodes)"
	done
) &
beat=$!
rc=0
"${GO:-go}" test "$@" 2>&1 | tee -a "$cache/test.log" || rc=$?
kill "$beat" 2>/dev/null || true
wait "$beat" 2>/dev/null || true
echo "make test: go test ended after $(duration $((SECONDS - start))) (exit $rc); its output is also in $cache/test.log"
wait "$builder"
for what in engines nodes; do
	if [[ $(cat "$cache/build-$what.rc") != 0 ]]; then
		echo "the background build (make $what) failed; the end of $cache/build-$what.log:"
		tail -n 40 "$cache/build-$what.log"
		rc=1
	fi
done
exit "$rc"
