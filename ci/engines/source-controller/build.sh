#!/usr/bin/env bash
# Flux's source-controller, from a wrapper module carrying its replace
# lines: the Flux stories' OCIRepository is reconciled by it and its
# artifact storage serves helm-controller the chart. Pinned to the
# version of the source API helm-controller is built against (ci/engines/flux).
set -euo pipefail
out=$1
v=$(go list -m -f '{{.Version}}' github.com/fluxcd/source-controller)
api=$(sed -n 's#^\tgithub.com/fluxcd/source-controller/api \(v[^ ]*\).*#\1#p' ../flux/go.mod)
if [[ $v != "$api" ]]; then
	echo "source-controller $v, but helm-controller is built against source API $api: pin them together" >&2
	exit 1
fi
mkdir -p "$out/bin"
go build -trimpath -o "$out/bin/source-controller" -ldflags "-s -w" github.com/fluxcd/source-controller
"$out/bin/source-controller" --help 2>&1 | grep -- --storage-adv-addr >/dev/null
