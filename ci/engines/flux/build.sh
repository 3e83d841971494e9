#!/usr/bin/env bash
# Flux's helm-controller, from a wrapper module carrying its replace lines,
# plus the CRDs a Flux install applies for it: helm-controller's and every
# source kind's (it watches HelmChart, OCIRepository and ExternalArtifact,
# whose caches never sync without their CRDs). source-controller is
# ci/engines/source-controller, a module of its own.
set -euo pipefail
out=$1
mkdir -p "$out/bin" "$out/flux/crds"
go build -trimpath -o "$out/bin/helm-controller" -ldflags "-s -w" github.com/fluxcd/helm-controller

# The CRDs of the very versions built against: helm-controller's own, and
# source-controller's at the version of the source API helm-controller
# requires (the two are tagged together).
hc=$(go list -m -f '{{.Dir}}' github.com/fluxcd/helm-controller)
sv=$(go list -m -f '{{.Version}}' github.com/fluxcd/source-controller/api)
# Outside this module, so the download leaves go.mod and go.sum alone.
sc=$(cd / && GOFLAGS= go mod download -json "github.com/fluxcd/source-controller@$sv" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
if [[ -z $sc || ! -d $sc/config/crd/bases ]]; then
	echo "source-controller $sv: no CRDs found in the module download" >&2
	exit 1
fi
rm -f "$out"/flux/crds/*.yaml
install -m 0644 "$hc"/config/crd/bases/*.yaml "$sc"/config/crd/bases/*.yaml "$out/flux/crds/"
ls "$out/flux/crds"
"$out/bin/helm-controller" --help 2>&1 | grep -- --feature-gates >/dev/null
