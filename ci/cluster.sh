#!/usr/bin/env bash
# `make cluster` / `make cluster-down`: run the local cluster in the
# background for people (tests start their own).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
state=$root/.cache/cluster
pidfile=$state/pid
mkdir -p "$state"

running() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case ${1:-} in
up)
	if running; then
		echo "cluster already running (pid $(cat "$pidfile")); stop it with: make cluster-down"
	else
		# shellcheck source=ci/progress.sh
		source "$root/ci/progress.sh"
		step 1 1 "building bin/npu-cluster (tests/cmd/npu-cluster): minutes with a cold Go cache, seconds after" \
			go build -o "$root/bin/npu-cluster" "$root/tests/cmd/npu-cluster"
		# The GitOps engines asked for, built once into .cache/engines.
		engines=()
		[[ " ${CLUSTER_ARGS:-} " == *" --flux "* ]] && engines+=(flux source-controller)
		[[ " ${CLUSTER_ARGS:-} " == *" --argocd "* ]] && engines+=(helm4 argocd)
		if ((${#engines[@]})); then
			bash "$root/ci/build-engines.sh" "${engines[@]}"
		fi
		rm -f "$state/ready"
		cd "$root"
		# shellcheck disable=SC2086 # CLUSTER_ARGS holds several flags
		nohup bin/npu-cluster up --state-dir "$state" ${CLUSTER_ARGS:-} </dev/null >"$state/cluster.log" 2>&1 &
		echo $! >"$pidfile"
		# The log's new lines are shown while it starts: its steps, and a
		# line every 30 s while one runs (the first start builds
		# npu-stack's binaries for minutes).
		shown=0
		show_log() {
			local total
			total=$(wc -l <"$state/cluster.log")
			if ((total > shown)); then
				sed -n "$((shown + 1)),${total}p" "$state/cluster.log"
				shown=$total
			fi
		}
		for _ in $(seq 1 1200); do
			show_log
			[[ -f $state/ready ]] && break
			if ! running; then
				show_log
				echo "cluster failed to start; log: $state/cluster.log" >&2
				exit 1
			fi
			sleep 1
		done
		[[ -f $state/ready ]] || { echo "cluster did not become ready in 20 minutes; see $state/cluster.log" >&2; exit 1; }
	fi
	cat <<MSG
local cluster running (pid $(cat "$pidfile")); point your tools at it with:

  export KUBECONFIG=$(cat "$state/ready")
  export PATH=${NPU_STACK_CP_DIR:-$root/.cache/controlplane}/bin:\$PATH
  kubectl get nodes -L openfuyao.com/npu.chip

its registry ($(cat "$state/registry" 2>/dev/null)) holds this checkout's images and chart:

  helm install npu-stack oci://$(cat "$state/registry" 2>/dev/null)/openfuyao/charts/npu-stack --devel -n npu-operator --create-namespace \\
    -f docs/examples/values-local-cluster.yaml --set imageRegistry=$(cat "$state/registry" 2>/dev/null),driver.version=25.3.0

inject a chip fault:  bin/npu-cluster wedge --state-dir $state --node npu-0 --chip 3
stop it:              make cluster-down
MSG
	;;
down)
	if ! running; then
		echo "no cluster running"
		rm -f "$pidfile"
		exit 0
	fi
	pid=$(cat "$pidfile")
	kill -TERM "$pid"
	for _ in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "cluster did not stop in 60s; killing it" >&2
		kill -KILL "$pid"
	fi
	rm -f "$pidfile"
	echo "cluster stopped"
	;;
*)
	echo "usage: $0 up|down" >&2
	exit 2
	;;
esac
