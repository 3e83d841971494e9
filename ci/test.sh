#!/usr/bin/env bash
# make test: `go test` starts at once while the deployers (.cache/engines)
# and the real nodes' binaries (.cache/nodes) build in the background. A
# test that needs them waits for that build at its first use: this script
# holds an exclusive flock on $NPU_STACK_BUILD_LOCK until the build ends,
# and testbed.EnginesDir/NodesDir take a shared one. So on a cold machine
# the packages that only need the control plane (rollout, reboot, health,
# ...: most of their time is waiting) run while the CPU builds.
# Usage: ci/test.sh CACHE_DIR GO_TEST_ARGS...
set -euo pipefail
mkdir -p "$1"
# Absolute: each test binary runs in its own package's directory.
cache=$(cd "$1" && pwd)
shift
lock=$cache/build.lock log=$cache/build.log rcfile=$cache/build.rc
rm -f "$rcfile"
exec 9>"$lock"
flock -x 9
# The subshell inherits fd 9, so the lock lives until it has written the
# build's exit code; the shell below closes its own copy before `go test`.
(
	rc=0
	"${MAKE:-make}" --no-print-directory engines nodes >"$log" 2>&1 || rc=$?
	echo "$rc" >"$rcfile"
) &
builder=$!
exec 9>&-
echo "building the deployers and the real nodes' binaries in the background (log: $log); the tests that need them wait for it"
export NPU_STACK_BUILD_LOCK=$lock
rc=0
"${GO:-go}" test "$@" || rc=$?
wait "$builder"
if [[ $(cat "$rcfile") != 0 ]]; then
	echo "the background build (make engines nodes) failed; the end of $log:"
	tail -n 40 "$log"
	exit 1
fi
exit "$rc"
