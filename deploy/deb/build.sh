#!/usr/bin/env bash
# Builds unitlet's Debian packages with nfpm (make deb): unitlet-<svc> for each service,
# unitletctl, the unitlet meta-package and unitlet-kubeadm (kubelet.service for kubeadm),
# into DIST. The binaries come from BIN (make build); the nfpm configurations and
# maintainer scripts from this directory.
#   usage: deploy/deb/build.sh NFPM BIN DIST
set -euo pipefail
shopt -s inherit_errexit
trap 'echo "deploy/deb/build.sh: line $LINENO: $BASH_COMMAND failed" >&2' ERR

nfpm=$1
bin=$(cd "$2" && pwd)
mkdir -p "$3"
dist=$(cd "$3" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

export VERSION REPO=$repo BIN=$bin ARCH MAINTAINER="unitlet maintainers <maintainers@users.noreply.a-seed-8c5ae03c.example>"
VERSION=$("$here/version.sh")
ARCH=$(dpkg --print-architecture)
# The commit's time stands for the build's in the changelog and manual pages (help2man reads
# it), so the same commit makes the same files.
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct)

# Each service's description: its one-line summary, '|', then the text after it.
declare -A about=(
	[config]="node configuration and identity for the unitlet node agent|unitlet-config reads the KubeletConfiguration in /etc/unitlet, does the TLS bootstrap and serves the configuration to the other services."
	[certs]="certificate rotation for the unitlet node agent|unitlet-certs renews the node's client and serving certificates through the API server's certificates API."
	[podsync]="pod lifecycle through CRI for the unitlet node agent|unitlet-podsync runs the node's pods through the container runtime's CRI: sources, admission, workers, probes, image GC."
	[status]="node and pod status, node API for the unitlet node agent|unitlet-status registers the Node, reports its conditions, lease and the pods' statuses, and serves the node API on port 10250."
	[volumes]="pod volumes for the unitlet node agent|unitlet-volumes prepares the pods' volumes: emptyDir, hostPath, configMap, secret, downwardAPI, projected."
	[eviction]="node-pressure eviction for the unitlet node agent|unitlet-eviction measures node pressure and evicts pods past the configured thresholds."
)
# Each service's relations, comma-separated ('-': none): the bus APIs and packages it cannot
# work without (Depends, besides the C library and systemd), those it uses when they are
# there (Recommends: it calls a service whose bus socket exists), and the state it alone
# keeps under /var/lib/unitlet, deleted on purge (the pods' directories and logs never are),
# and the sysctl.d files it ships, applied by its postinst.
# integration/debtest checks the bus APIs against the imports of each service's code.
services=$(
	cat <<-'TABLE'
	config    procps                                        -                                                 /var/lib/unitlet/checkpoints,/var/lib/unitlet/unitlet-config.lock  /usr/lib/sysctl.d/90-unitlet.conf
	certs     unitlet-bus-config-v1                         -                                                 -                                                                  -
	podsync   unitlet-bus-config-v1                         unitlet-bus-volumes-v1,unitlet-bus-eviction-v1,containerd  /var/lib/unitlet/podsync,/var/lib/unitlet/image_manager  -
	status    unitlet-bus-config-v1,unitlet-bus-podsync-v1  unitlet-bus-volumes-v1,unitlet-bus-eviction-v1   -                                                                  -
	volumes   unitlet-bus-config-v1,unitlet-bus-podsync-v1  -                                                 -                                                                  -
	eviction  unitlet-bus-config-v1,unitlet-bus-podsync-v1  -                                                 /var/lib/unitlet/eviction                                          -
	TABLE
)

# libc NAME: the C library dependency of the binary BIN/NAME as dpkg-shlibdeps computes it
# from the symbols it needs (none when Go built it without cgo, statically).
libc() {
	local stub
	stub=$(mktemp -d)
	mkdir "$stub/debian"
	printf 'Source: unitlet\n\nPackage: %s\nArchitecture: any\n' "$1" >"$stub/debian/control"
	# It warns that the binary is not under debian/<package>/: it is not meant to be.
	(cd "$stub" && dpkg-shlibdeps -O "$bin/$1" 2>/dev/null) >"$stub/out"
	rm -rf "$stub/debian"
	sed -n 's/^shlibs:Depends=//p' "$stub/out"
	rm -rf "$stub"
}

# manual NAME SECTION SUMMARY DIR: the manual page of BIN/NAME, from its --help.
manual() {
	help2man --no-info --version-string="$VERSION" --section="$2" --name="$3" "$bin/$1" |
		gzip -9n >"$4/$1.$2.gz"
}

# package DIR CONFIG: nfpm in DIR (relative paths in CONFIG are DIR's), after DIR's
# copyright file, lintian overrides and changelog.
package() {
	local dir=$1 config=$2 name
	name=$(basename "$dir")
	cp "$here/copyright" "$dir/copyright"
	cat "$here/lintian-overrides" >"$dir/lintian-overrides"
	if [ -f "$here/$name.lintian-overrides" ]; then
		cat "$here/$name.lintian-overrides" >>"$dir/lintian-overrides"
	fi
	printf '%s (%s) unstable; urgency=medium\n\n  * Built from commit %s (git describe: %s).\n\n -- %s  %s\n' \
		"$name" "$VERSION" "$(git -C "$repo" rev-parse --short=12 HEAD)" "$(git -C "$repo" describe --tags --always --dirty)" \
		"$MAINTAINER" "$(TZ=UTC0 git -C "$repo" log -1 --format=%cd --date=format-local:'%a, %d %b %Y %H:%M:%S +0000')" |
		gzip -9n >"$dir/changelog.gz"
	(cd "$dir" && "$nfpm" package --packager deb --config "$config" --target "$dist/")
}

# relation FIELD SEPARATOR: a field of the table ('-' for none) as a list.
relation() { [ "$1" = - ] || echo "${1//,/$2}"; }

rm -rf "$dist/build"
rm -f "$dist"/*.deb

while read -r svc deps recs state sysctl; do
	dir=$dist/build/unitlet-$svc
	mkdir -p "$dir"
	for script in postinst prerm postrm; do
		sed -e "s|@SVC@|$svc|g" -e "s|@STATE@|$(relation "$state" " ")|g" -e "s|@SYSCTL@|$(relation "$sysctl" " ")|g" \
			"$here/scripts/service.$script" >"$dir/$script"
	done
	cat "$here/service.yaml" >"$dir/nfpm.yaml"
	if [ -f "$here/unitlet-$svc.contents.yaml" ]; then
		cat "$here/unitlet-$svc.contents.yaml" >>"$dir/nfpm.yaml"
	fi
	summary=${about[$svc]%%|*}
	manual "unitlet-$svc" 8 "$summary" "$dir"
	libc=$(libc "unitlet-$svc")
	SVC=$svc SUMMARY=$summary DESCRIPTION=$(fold -s -w 79 <<<"${about[$svc]#*|}" | sed 's/ *$//') \
		LIBC=$libc DEPENDS=$(relation "$deps" ", ") RECOMMENDS=$(relation "$recs" ", ") \
		package "$dir" "$dir/nfpm.yaml"
done <<<"$services"
mkdir -p "$dist/build/unitletctl" "$dist/build/unitlet" "$dist/build/unitlet-kubeadm"
manual unitletctl 1 "command-line client of the unitlet node agent" "$dist/build/unitletctl"
libc=$(libc unitletctl)
LIBC=$libc package "$dist/build/unitletctl" "$here/unitletctl.yaml"
cp "$here/scripts/unitlet.postinst" "$dist/build/unitlet/postinst"
cp "$here/scripts/unitlet.postrm" "$dist/build/unitlet/postrm"
package "$dist/build/unitlet" "$here/unitlet.yaml"
for script in postinst prerm postrm; do
	cp "$here/scripts/kubeadm.$script" "$dist/build/unitlet-kubeadm/$script"
done
package "$dist/build/unitlet-kubeadm" "$here/unitlet-kubeadm.yaml"
ls -l "$dist"/*.deb
