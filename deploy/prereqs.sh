#!/usr/bin/env bash
# Installs what building, running and testing unitlet need on a Debian 12 machine, and
# fails with what to do when something cannot be installed. Safe to run again: it installs
# only what is missing.
set -euo pipefail

need_go="1.26"
# command -> Debian package that provides it
declare -A packages=(
	[systemd-analyze]=systemd
	[systemd-socket-activate]=systemd
	[setpriv]=util-linux
	[git]=git
	[containerd]=containerd
	[ctr]=containerd
	[runc]=runc
	# the harness's nspawn nodes: the machine tree, the machine, entering it
	[debootstrap]=debootstrap
	[systemd-nspawn]=systemd-container
	[nsenter]=util-linux
	# the harness's vm nodes: the emulator, the disk image
	[qemu-system-x86_64]=qemu-system-x86
	[mkfs.ext4]=e2fsprogs
	# make deb: the libc dependency, the manual pages; make deb-check: the packages' lint
	[dpkg-shlibdeps]=dpkg-dev
	[help2man]=help2man
	[lintian]=lintian
)
# Debian packages checked by name (the harness needs the static busybox and the CNI plugins
# in /usr/lib/cni, which no command names; the containerd 2.x stack's runc is built with
# seccomp, from libseccomp's headers, by gcc through pkg-config).
by_name=(busybox-static containernetworking-plugins libseccomp-dev gcc pkg-config)

have_go() {
	command -v go >/dev/null 2>&1 || return 1
	local v
	v=$(go env GOVERSION | sed 's/^go//')
	[ "$(printf '%s\n%s\n' "$need_go" "$v" | sort -V | head -n1)" = "$need_go" ]
}
if ! have_go; then
	echo "prereqs: Go $need_go or newer is needed (found: $(go version 2>/dev/null || echo none))." >&2
	echo "prereqs: install it from https://go.dev/dl/ or set GOTOOLCHAIN=go$need_go.0 with an older go on PATH." >&2
	exit 1
fi

missing=()
for cmd in "${!packages[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${packages[$cmd]}")
done
for pkg in "${by_name[@]}"; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	if [ "$(id -u)" -ne 0 ]; then
		echo "prereqs: missing packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	echo "prereqs: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for cmd in "${!packages[@]}"; do
	if ! command -v "$cmd" >/dev/null 2>&1; then
		echo "prereqs: $cmd is still missing after installing ${packages[$cmd]}" >&2
		exit 1
	fi
done
for pkg in "${by_name[@]}"; do
	if ! dpkg -s "$pkg" >/dev/null 2>&1; then
		echo "prereqs: package $pkg is still missing" >&2
		exit 1
	fi
done
