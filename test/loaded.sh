#!/usr/bin/env bash
# Runs the test suite (`make test`) LOADED_RUNS times (default 3) while
# LOADED_BURNERS CPU burners (default: one per core) keep every core busy,
# and prints each run's counts of passed, failed and skipped tests (and the
# failed tests' names). A test that waits on a budget load can exceed, or
# sleeps to synchronise, fails here. Each run's go test -json output is kept
# in test-loaded-<n>.json. Exit status: 0 when every run passed.
#
# The burners are this script's children, stopped by PID when it ends,
# however it ends (the trap); each also stops on its own once this script
# is gone, should the script be killed with SIGKILL (the make test under
# way then runs to its end). Ctrl-C stops the tests as it stops make test.
set -uo pipefail
runs=${LOADED_RUNS:-3}
burners=${LOADED_BURNERS:-$(nproc)}
make=${MAKE:-make}

pids=() # the burners
mk=      # the running make test
stop() {
	if [ -n "$mk" ]; then
		kill "$mk" 2>/dev/null
		wait "$mk" 2>/dev/null
	fi
	((${#pids[@]})) || return 0
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	pids=()
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

self=$$
for ((i = 0; i < burners; i++)); do
	(while kill -0 "$self" 2>/dev/null; do :; done) &
	pids+=($!)
done
echo "test/loaded.sh: $burners CPU burners (PIDs ${pids[*]}), $runs run(s) of $make test"

# count ACTION FILE: the tests (subtests included) that ended with ACTION.
count() { grep -cE "\"Action\":\"$1\",\"Package\":\"[^\"]*\",\"Test\":" "$2"; }

status=0
summary=()
for ((r = 1; r <= runs; r++)); do
	echo "== loaded run $r of $runs"
	rm -f test.json "test-loaded-$r.json"
	# In the background, so that a signal to this script is handled at
	# once (wait returns) and reaches make too; with SIGINT not ignored (as
	# bash makes it for background commands), so that Ctrl-C stops make
	# and the tests as it does `make test`.
	(
		trap - INT QUIT
		exec $make test
	) &
	mk=$!
	wait "$mk"
	rc=$? mk=
	((rc == 0)) || status=1
	[ -f test.json ] && mv test.json "test-loaded-$r.json"
	f=test-loaded-$r.json
	if [ -f "$f" ]; then
		line="run $r: $(count pass "$f") passed, $(count fail "$f") failed, $(count skip "$f") skipped (make test exit $rc)"
		failed=$(grep -oE '"Action":"fail","Package":"[^"]*","Test":"[^"]*"' "$f" |
			sed -E 's/.*"Package":"([^"]*)","Test":"([^"]*)"/\1.\2/' | tr '\n' ' ')
		[ -n "$failed" ] && line+=$'\n'"  failed: $failed"
	else
		line="run $r: no test results (make test exit $rc)"
	fi
	summary+=("$line")
	echo "$line"
done
echo "== test/loaded.sh: $burners burners"
printf '%s\n' "${summary[@]}"
exit $status
