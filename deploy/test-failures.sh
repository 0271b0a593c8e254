#!/usr/bin/env bash
# test-failures.sh LOG...: the failing tests of `go test -v` logs, each with the last lines
# its test code printed (t.Log and t.Error alike: `file.go:N: ...` lines and the first
# three lines of each one's continuation, cut to 300 characters). make test prints it last when a suite
# fails, so that the end of its output names what failed and why: a failing test's
# messages may otherwise sit above a long dump (a journal, the harness's teardown).
set -euo pipefail

per_test=${UNITLET_FAILURE_LINES:-40}
for log in "$@"; do
	[ -f "$log" ] || continue
	awk -v per="$per_test" -v logname="$log" '
		function keep(name, line) {
			n[name]++
			lines[name, n[name]] = substr(line, 1, 300)
		}
		/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
		/^ *--- FAIL: / {
			name = $3
			if (!(name in failed)) { failed[name] = 1; order[++nfailed] = name }
			# Without -v, a failing test'"'"'s lines come after this line.
			cur = name
			next
		}
		/^ +[A-Za-z0-9_.-]+\.go:[0-9]+: / { if (cur != "") keep(cur, $0); cont = 0; next }
		/^        / { if (cur != "" && ++cont <= 3) keep(cur, $0); next }
		/^(panic: |fatal error: )/ { if (cur != "") keep(cur, $0) }
		END {
			if (nfailed == 0) exit
			printf "== failing tests in %s, each with its last %d lines of test output:\n", logname, per
			for (i = 1; i <= nfailed; i++) {
				name = order[i]
				printf "--- %s\n", name
				from = n[name] - per + 1
				if (from < 1) from = 1
				for (j = from; j <= n[name]; j++) print lines[name, j]
			}
		}
	' "$log"
done
