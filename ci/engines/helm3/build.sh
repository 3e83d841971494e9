#!/usr/bin/env bash
# helm v3.22 CLI. Without the k8sVersion flags `helm template`/`lint`
# assume Kubernetes 1.20 and refuse the chart's kubeVersion (docs/installation.md).
set -euo pipefail
out=$1
v=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
mkdir -p "$out/helm3"
go build -trimpath -o "$out/helm3/helm" -ldflags "-s -w \
 -X helm.sh/helm/v3/internal/version.version=$v \
 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" \
	helm.sh/helm/v3/cmd/helm
"$out/helm3/helm" version --short
