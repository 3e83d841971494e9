#!/usr/bin/env bash
# helm v4.3 CLI, as Argo CD's repo server and `helm` users run it.
set -euo pipefail
out=$1
v=$(go list -m -f '{{.Version}}' helm.sh/helm/v4)
mkdir -p "$out/helm4"
go build -trimpath -o "$out/helm4/helm" -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$v" helm.sh/helm/v4/cmd/helm
"$out/helm4/helm" version --short
