#!/usr/bin/env bash
# Prints the git ref whose proto/ API the current one must stay compatible with: the last
# commit on main. On a clean checkout of main (as in CI) that is HEAD~1, the commit before
# the one under test; with local changes or on another branch it is main itself. Prints
# nothing when that commit has no API yet.
set -euo pipefail
branch=$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo "")
if [ "$branch" = "main" ] && [ -z "$(git status --porcelain -- proto 2>/dev/null)" ]; then
	ref=HEAD~1
else
	ref=main
fi
if git rev-parse --verify -q "$ref^{commit}" >/dev/null && git cat-file -e "$ref:proto/buf.yaml" 2>/dev/null; then
	git rev-parse "$ref"
fi
