#!/usr/bin/env bash
# make test's end: deploy/test-report.sh DIR STEP...
# DIR holds the run's times file (deploy/timed.sh) and the steps' logs; STEP... are every
# step the run should have had. Prints each step's log in the order the steps started, then
# the failing tests of the steps that failed, each with the last lines its test code printed
# (deploy/test-failures.sh), then the table of where the time went (integration/suitetimes)
# and the verdict. Exits 1 when a step failed or did not run.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
times=$dir/times.tsv
touch "$times"

while IFS=$'\t' read -r name start end rc log; do
	echo
	echo "== $name (exit status $rc, $((end - start)) s), from $log:"
	cat "$log"
done < <(sort -t $'\t' -k2,2n "$times")

failed=() failedlogs=() notrun=()
for step in "$@"; do
	line=$(awk -F '\t' -v s="$step" '$1 == s' "$times")
	if [ -z "$line" ]; then
		notrun+=("$step")
	elif [ "$(cut -f4 <<<"$line")" != 0 ]; then
		failed+=("$step")
		failedlogs+=("$(cut -f5 <<<"$line")")
	fi
done
echo
if [ ${#failed[@]} -gt 0 ]; then
	deploy/test-failures.sh "${failedlogs[@]}"
	echo
fi
go run ./integration/suitetimes "$times"
if [ ${#notrun[@]} -gt 0 ]; then
	echo "make test: did not run, as a step they need failed: ${notrun[*]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "make test: failed: ${failed[*]} (their logs above; the failing tests last)"
fi
if [ ${#failed[@]} -gt 0 ] || [ ${#notrun[@]} -gt 0 ]; then
	exit 1
fi
echo "make test: all passed"
