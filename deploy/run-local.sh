#!/usr/bin/env bash
# `make run`: a standalone unitlet node on this machine — containerd with its own root and
# socket, a bridge network, the project's images, and unitlet-config, -podsync, -status and
# -volumes as local processes running the static pods of deploy/examples/ with no API
# server (the stack integration/stacks/standalone.yaml). It shows the node with unitletctl and keeps it
# running until Ctrl-C, which takes everything down again.
set -euo pipefail
bin=${1:?usage: run-local.sh BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
stack="$repo/integration/stacks/standalone.yaml"
harness="$bin/unitlet-harness"
node=local
on_node() { "$harness" exec -f "$stack" "$node" -- "$@"; }

down() {
	trap - EXIT INT TERM
	echo
	echo "== taking the node down"
	"$harness" down -f "$stack" || true
}
trap down EXIT INT TERM

echo "== bringing up the standalone node (containerd, images, unitlet-config, -podsync, -status, -volumes)"
# The binaries make build made: the harness copies them instead of compiling again.
(cd "$repo" && UNITLET_BIN_DIR="$bin" "$harness" up -f "$stack")
manifests=${UNITLET_HARNESS_DIR:-/var/tmp/unitlet-harness}/standalone/nodes/$node/manifests
cp "$here"/examples/*.yaml "$manifests/"
echo "== static pods from deploy/examples/ copied into $manifests"

printf "waiting for them to run and be ready"
for _ in $(seq 60); do
	# Every pod Running with all its containers ready (READY n/n).
	if on_node unitletctl pods | awk 'NR>1 {n++; split($4, r, "/"); if ($3!="Running" || r[1]!=r[2]) bad=1} END {exit (n==0 || bad)}'; then
		break
	fi
	printf "."
	sleep 1
done
echo
echo "== unitletctl status"
on_node unitletctl status config podsync status volumes eviction || true
echo
echo "== unitletctl node (standalone: nothing is written to an API server)"
on_node unitletctl node || true
echo
echo "== unitletctl pods"
on_node unitletctl pods
echo
echo "The node runs until Ctrl-C. Meanwhile, in another shell:"
echo "  $harness exec -f $stack $node -- unitletctl pods      # the pods"
echo "  $harness logs -f $stack $node/unitlet-podsync          # podsync's log"
echo "  curl -sk https://127.0.0.1:10350/healthz                  # the node API (the stack's nodeAPIPort)"
echo "  add, edit or remove manifests in $manifests: podsync follows within a second"
while sleep 3600; do :; done
