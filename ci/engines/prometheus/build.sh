#!/usr/bin/env bash
# Prometheus and promtool v3 (module github.com/prometheus/prometheus
# v0.316.0), for the alert-rule tests (`promtool test rules` over the
# chart's PrometheusRule) and the test bed's real Prometheus, which scrapes
# the process nodes' agents and the fleet exporter. remove_all_sd keeps
# only the static, file and HTTP service discoveries (the test bed points
# Prometheus at loopback ports with file_sd): a third of the build. No
# builtinassets: the web UI is not needed, the HTTP API is.
set -euo pipefail
out=$1
v=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
mkdir -p "$out/prometheus"
ld="-s -w -X github.com/prometheus/common/version.Version=$v -X github.com/prometheus/common/version.Branch=module -X github.com/prometheus/common/version.Revision=$v"
go build -trimpath -tags remove_all_sd -o "$out/prometheus/" -ldflags "$ld" \
	github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
"$out/prometheus/promtool" --version | head -1
"$out/prometheus/prometheus" --version | head -1
