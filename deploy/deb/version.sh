#!/usr/bin/env bash
# Prints the Debian version of the packages built from this checkout, from
# `git describe --tags --always --dirty` (README.md, "Debian packages"):
#   on a tag vX.Y.Z                   X.Y.Z
#   N commits after vX.Y.Z            X.Y.Z+git<date>.<N>.<sha>
#   no tag yet                        0.0.0~git<date>.<sha>
#   uncommitted changes               the above, then +dirty
# <date> is the commit's date in UTC (YYYYMMDDhhmmss), so later commits sort higher; a '-'
# in a tag (v1.0.0-rc.1) becomes '~' (1.0.0~rc.1 sorts before 1.0.0).
set -euo pipefail
cd "$(dirname "$0")/../.."

describe=$(git describe --tags --always --dirty)
date=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)
suffix=""
if [[ $describe == *-dirty ]]; then
	suffix="+dirty"
	describe=${describe%-dirty}
fi
tag_version() {
	local v=${1#v}
	if [[ ! $v =~ ^[0-9][0-9A-Za-z.+-]*$ ]]; then
		echo "version.sh: tag $1 is not vX.Y.Z: cannot make a Debian version of it" >&2
		exit 1
	fi
	echo "${v//-/\~}"
}
if [[ $describe =~ ^(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
	echo "$(tag_version "${BASH_REMATCH[1]}")+git$date.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}$suffix"
elif [[ $describe =~ ^[0-9a-f]+$ ]] && ! git rev-parse -q --verify "refs/tags/$describe" >/dev/null; then
	echo "0.0.0~git$date.$describe$suffix"
else
	echo "$(tag_version "$describe")$suffix"
fi
