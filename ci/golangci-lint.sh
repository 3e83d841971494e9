#!/usr/bin/env bash
# Runs golangci-lint, built once from the pinned version in
# ci/golangci-lint/go.mod into .cache/tools.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/.cache/tools
stamp=$(cat "$root/ci/golangci-lint/go.mod" "$root/ci/golangci-lint/go.sum" <(go version) | sha256sum | cut -d' ' -f1)
if [[ ! -x $tools/golangci-lint || $(cat "$tools/golangci-lint.stamp" 2>/dev/null) != "$stamp" ]]; then
	echo "building golangci-lint (once)"
	mkdir -p "$tools"
	(cd "$root/ci/golangci-lint" && go build -o "$tools/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
	echo "$stamp" >"$tools/golangci-lint.stamp"
fi
cd "$root"
"$tools/golangci-lint" run ./...
