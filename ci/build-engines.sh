#!/usr/bin/env bash
# Builds the deployment engines the deployer tests drive — the helm v3 and
# v4 CLIs, helmfile, Flux's source-controller and helm-controller, Argo CD —
# from the Go module proxy into a gitignored cache, like the control plane. Each engine is a
# Go module of its own under ci/engines/<name> (its dependencies never
# touch npu-stack's) with a build.sh that installs into $out. A stamp per
# engine (Go version + that directory's files) makes a second run a no-op
# and rebuilds only the engine whose pins changed.
#
# usage: ci/build-engines.sh [engine...]   (default: every engine; the
# README tour needs only helm3: `make engines ENGINES=helm3`)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${NPU_STACK_ENGINES_DIR:-$root/.cache/engines}
mkdir -p "$out/bin" "$out/stamps"

engines=("$@")
if ((${#engines[@]} == 0)); then
	for d in "$root"/ci/engines/*/; do
		engines+=("$(basename "$d")")
	done
fi

# shellcheck source=ci/progress.sh
source "$root/ci/progress.sh"
build_engine() (cd "$1" && bash ./build.sh "$out")
n=0
for e in "${engines[@]}"; do
	n=$((n + 1))
	dir=$root/ci/engines/$e
	if [[ ! -f $dir/build.sh ]]; then
		echo "unknown engine $e: no $dir/build.sh" >&2
		exit 2
	fi
	want=$({ go version; cd "$dir" && find . -type f | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -d' ' -f1)
	if [[ -f $out/stamps/$e && $(cat "$out/stamps/$e") == "$want" ]]; then
		echo "[$n/${#engines[@]}] engine $e up to date in $out"
		continue
	fi
	rm -f "$out/stamps/$e"
	step "$n" "${#engines[@]}" "building engine $e into $out (once; reused until ci/engines/$e changes)" \
		build_engine "$dir"
	echo "$want" > "$out/stamps/$e"
done
