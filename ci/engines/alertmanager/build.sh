#!/usr/bin/env bash
# Alertmanager v0.35.0's own configuration and inhibition code, for the
# test of the inhibit rule docs/observability.md documents (planned
# reboots do not page): amtool (check-config: Alertmanager's parser) and
# npu-inhibit-check (inhibitcheck/: the documented rule applied to the
# alerts' labels with inhibit.NewInhibitRule's matchers). The
# alertmanager binary itself does not build from the module proxy: its
# web UI (ui/app/dist) is generated at release time and not in the module.
set -euo pipefail
out=$1
v=$(go list -m -f '{{.Version}}' github.com/prometheus/alertmanager)
mkdir -p "$out/alertmanager"
go build -trimpath -o "$out/alertmanager/" -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" \
	github.com/prometheus/alertmanager/cmd/amtool ./inhibitcheck
mv "$out/alertmanager/inhibitcheck" "$out/alertmanager/npu-inhibit-check"
"$out/alertmanager/amtool" --version 2>&1 | head -1
