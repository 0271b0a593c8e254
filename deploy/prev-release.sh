#!/usr/bin/env bash
# Builds unitlet's previous release, the one the mixed-version and upgrade tests run beside
# the current build (make prev-release; README.md, "Upgrades and mixed versions"): the
# binaries and Debian packages of COMMIT, built by that commit's own Makefile from a
# checkout of it, into CACHE/prev-release/<commit>/{bin,dist}. Built once: a later call
# finds them there and only prints the directory.
#   usage: deploy/prev-release.sh COMMIT CACHE
set -euo pipefail
shopt -s inherit_errexit

commit=$1
cache=$2
repo=$(cd "$(dirname "$0")/.." && pwd)

if ! full=$(git -C "$repo" rev-parse --verify -q "$commit^{commit}"); then
	echo "prev-release.sh: commit $commit (the previous release the Makefile pins as PREV_RELEASE) is not in this clone's history; fetch it (git fetch --unshallow, or git fetch origin $commit) and run again" >&2
	exit 1
fi
out=$cache/prev-release/$full
if [ -f "$out/done" ]; then
	echo "$out"
	exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/unitlet-prev-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "prev-release.sh: building the previous release, $full, in $work (once; cached in $out)" >&2
# A clone that shares this one's objects: the build's git describe and version.sh read
# the commit as its own checkout would.
git clone -q --shared --no-checkout "$repo" "$work/src"
git -C "$work/src" checkout -q --detach "$full"
make -C "$work/src" --no-print-directory build deb CACHE="$cache" >&2
rm -rf "$out"
mkdir -p "$out"
cp -a "$work/src/bin" "$out/bin"
mkdir -p "$out/dist"
cp -a "$work/src/dist"/*.deb "$out/dist/"
git -C "$work/src" describe --tags --always >"$out/describe"
touch "$out/done"
echo "$out"
