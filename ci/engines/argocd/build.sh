#!/usr/bin/env bash
# Argo CD v3.6 (application controller, repo server): one multi-call
# `argocd` binary that takes its role from its file name, installed under
# the role names the test bed runs, plus the CRDs of the same module.
# Argo CD v3.6 needs Go 1.27; the toolchain comes from the module proxy
# and is used for this build only (npu-stack itself stays on Go 1.26).
set -euo pipefail
export GOTOOLCHAIN=go1.27.3
out=$1
mod=github.com/argoproj/argo-cd/v3
v=$(go list -m -f '{{.Version}}' "$mod")
kubectl=$(go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubectl)
go mod download "$mod"
dir=$(go list -m -f '{{.Dir}}' "$mod") # the CRDs of this very version
rm -rf "$out/argocd"
mkdir -p "$out/argocd/crds"
# Version stamps as argo-cd's Makefile sets them (no commit in a module
# zip: `argocd version` says v3.6.1+unknown).
CGO_ENABLED=0 go build -trimpath -o "$out/argocd/argocd" -ldflags "-s -w \
 -X $mod/common.version=${v#v} -X $mod/common.gitTag=$v -X $mod/common.gitTreeState=clean \
 -X $mod/common.kubectlVersion=$kubectl" \
	"$mod/cmd"
for role in argocd-application-controller argocd-repo-server; do
	ln -s argocd "$out/argocd/$role"
done
cp "$dir"/manifests/crds/application-crd.yaml "$dir"/manifests/crds/appproject-crd.yaml "$out/argocd/crds/"
chmod 0644 "$out"/argocd/crds/*.yaml
"$out/argocd/argocd" version --client --short
