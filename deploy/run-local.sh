#!/usr/bin/env bash
# `make run`: starts this node's unitlet services as local processes with deploy/'s example
# configuration, shows them with unitletctl, and keeps them running until Ctrl-C.
# State and sockets go under UNITLET_RUN_DIR (default /tmp/unitlet-run), never into /run or
# /var/lib, so it does not touch a node that is installed on this machine.
set -euo pipefail
bin=${1:?usage: run-local.sh BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
run=${UNITLET_RUN_DIR:-/tmp/unitlet-run}
mkdir -p "$run/sock" "$run/root"
export UNITLET_SOCKET_DIR="$run/sock"
export UNITLET_METRICS_ADDR=${UNITLET_METRICS_ADDR:-127.0.0.1:10271}

pids=()
stop() {
	trap - EXIT INT TERM
	echo
	echo "stopping: ${pids[*]}"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	wait || true
}
trap stop EXIT INT TERM

"$bin/unitlet-config" --config="$here/config.yaml" --config-dir="$here/config.d" \
	--root-dir="$run/root" 2>>"$run/unitlet-config.log" &
pids+=($!)

for _ in $(seq 100); do
	[ -S "$UNITLET_SOCKET_DIR/config.sock" ] && break
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		echo "unitlet-config exited; its log ($run/unitlet-config.log):" >&2
		tail -n 20 "$run/unitlet-config.log" >&2
		exit 1
	fi
	sleep 0.1
done

echo "== unitletctl status (services of later issues are not started yet)"
"$bin/unitletctl" status || true
echo
echo "== unitletctl config"
"$bin/unitletctl" config
echo
echo "unitlet-config is running: pid ${pids[0]}, log $run/unitlet-config.log"
echo "  bus socket  $UNITLET_SOCKET_DIR/config.sock   (UNITLET_SOCKET_DIR=$UNITLET_SOCKET_DIR $bin/unitletctl status)"
echo "  metrics     http://$UNITLET_METRICS_ADDR/metrics   /configz   /healthz"
echo "  reload      edit deploy/config.yaml or deploy/config.d/*.conf, or kill -HUP ${pids[0]}"
echo "Ctrl-C stops it."
wait
