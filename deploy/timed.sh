#!/usr/bin/env bash
# Runs one step of make test and records how long it took, for the report at the end
# (deploy/test-report.sh, integration/suitetimes):
#   deploy/timed.sh TIMES NAME LOG -- COMMAND...
# COMMAND's output goes to LOG; standard output gets a line when the step starts and one
# when it ends. A line "NAME, start, end (Unix seconds), exit status, LOG" (tab-separated)
# is appended to TIMES. Exits as COMMAND did.
set -uo pipefail
times=$1 name=$2 log=$3
shift 3
if [ "${1:-}" = -- ]; then shift; fi
mkdir -p "$(dirname "$log")" "$(dirname "$times")"
start=$(date +%s)
echo "make test: $(date +%T) $name started (log: $log)"
"$@" >"$log" 2>&1
rc=$?
end=$(date +%s)
printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$start" "$end" "$rc" "$log" >>"$times"
if [ "$rc" = 0 ]; then
	echo "make test: $(date +%T) $name passed after $((end - start)) s"
else
	echo "make test: $(date +%T) $name FAILED (exit status $rc) after $((end - start)) s: the end of its log:"
	tail -n 20 "$log" | sed "s/^/  $name: /"
fi
exit "$rc"
