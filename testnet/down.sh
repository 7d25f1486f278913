#!/usr/bin/env bash
# Stops a testnet that testnet/up.sh started: exactly the processes listed
# in RUN_DIR/pids, and only those still running `strata node` on that run
# directory (a recycled PID is left alone). SIGTERM starts a node's drain;
# a second SIGTERM makes it exit at once. Logs and data dirs stay.
#
#   testnet/down.sh [RUN_DIR]    # default: the latest run of up.sh
set -euo pipefail

last=${TMPDIR:-/tmp}/strata-testnet.last
if [ $# -ge 1 ]; then
	RUN=$1
elif [ -s "$last" ]; then
	RUN=$(cat "$last")
else
	echo "usage: $0 RUN_DIR   (no latest run recorded in $last)" >&2
	exit 2
fi
PIDS=$RUN/pids
[ -f "$PIDS" ] || { echo "no pids file in $RUN: nothing to stop" >&2; exit 1; }
RUN=$(cd "$RUN" && pwd)

# ours PID NAME: the process is a strata node whose data dir is RUN/NAME.
ours() {
	local cmd
	cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
	[[ $cmd == *" node "* && $cmd == *"--data-dir $RUN/$2 "* ]]
}

pids=() names=()
while read -r pid name; do
	[[ $pid =~ ^[0-9]+$ ]] || continue
	if ours "$pid" "$name"; then
		pids+=("$pid")
		names+=("$name")
	else
		echo "$name (pid $pid): not running"
	fi
done <"$PIDS"

running() { local p; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
if [ ${#pids[@]} -gt 0 ]; then
	echo "stopping ${#pids[@]} node(s): ${pids[*]}"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 100); do running || break; sleep 0.1; done
	for i in "${!pids[@]}"; do
		if kill -0 "${pids[$i]}" 2>/dev/null; then
			echo "${names[$i]} (pid ${pids[$i]}): still running after two SIGTERMs and 10 s" >&2
		else
			echo "${names[$i]} (pid ${pids[$i]}): stopped"
		fi
	done
	running && exit 1
else
	echo "no node of this run is running"
fi
: >"$PIDS"
[ "$(cat "$last" 2>/dev/null || true)" != "$RUN" ] || rm -f "$last"
echo "logs and data dirs kept in $RUN"
