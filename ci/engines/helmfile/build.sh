#!/usr/bin/env bash
# helmfile v1.8, from a wrapper module carrying its replace lines. It
# drives whichever `helm` is first on PATH.
set -euo pipefail
out=$1
v=$(go list -m -f '{{.Version}}' github.com/helmfile/helmfile)
mkdir -p "$out/bin"
go build -trimpath -o "$out/bin/helmfile" -ldflags "-s -w -X go.szostok.io/version.version=$v" github.com/helmfile/helmfile
"$out/bin/helmfile" --version
