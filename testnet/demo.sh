#!/usr/bin/env bash
# The main job (`make run`): a small local swarm on a generated model
# answering a real request. Three `strata node` processes on loopback, each
# capped at half the model's layers so that every path has two hops; the
# last one joins with a prompt, generates through the swarm and prints the
# text, which is then checked against a single-process run of the same
# model. Everything lives under one run directory; the script stops exactly
# the processes it started.
set -euo pipefail
BIN=${BIN:-bin/strata}
RUN=${RUN:-$(mktemp -d -t strata-demo.XXXXXX)}
PORT=${PORT:-4301}
PROMPT=${PROMPT:-Once upon a time}
TOKENS=${TOKENS:-24}
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

echo "run directory: $RUN"
"$BIN" model gen --out "$RUN/model.gguf" --layers 8 --dim 128 --heads 4 --kv-heads 2 --ffn 320 --seed 7

start() { # name port extra-args...
	local name=$1 port=$2
	shift 2
	"$BIN" node --data-dir "$RUN/$name" --listen "/ip4/127.0.0.1/tcp/$port" --model "$RUN/model.gguf" \
		--max-layers 4 --threads 1 --log-peers 0 "$@" >"$RUN/$name.out" 2>"$RUN/$name.log" &
	pids+=($!)
}

start n1 "$PORT"
for _ in $(seq 100); do
	boot=$(grep -o "/ip4/127.0.0.1/tcp/$PORT/p2p/[A-Za-z0-9]*" "$RUN/n1.out" "$RUN/n1.log" 2>/dev/null | head -1 | cut -d: -f2- || true)
	[ -n "$boot" ] && break
	sleep 0.1
done
[ -n "$boot" ] || { echo "node n1 did not start; see $RUN/n1.log" >&2; exit 1; }
echo "founder: $boot"
start n2 $((PORT + 1)) --bootstrap "$boot"
start n3 $((PORT + 2)) --bootstrap "$boot" --prompt "$PROMPT" --max-tokens "$TOKENS"

# n3 prints the generated text on stdout once the swarm serves it.
for _ in $(seq 600); do
	grep -aq 'generated' "$RUN/n3.log" 2>/dev/null && break
	sleep 0.1
done
if ! grep -aq 'generated' "$RUN/n3.log"; then
	echo "no generation within 60 s; logs in $RUN" >&2
	exit 1
fi
sleep 0.2
# Random weights give random tokens, so show non-printable bytes escaped.
swarm_text=$(grep -av '^peer ID\|^model \|^listening on\|^  /' "$RUN/n3.out" | head -1 | cat -v)
single_text=$("$BIN" generate --model "$RUN/model.gguf" --prompt "$PROMPT" --max-tokens "$TOKENS" 2>/dev/null | head -1 | cat -v)
echo
echo "committed map:"
grep -a 'committed map' "$RUN/n3.log" | tail -1 | sed 's/^.*"stages"/  stages/'
echo "path and timing:"
grep -a 'generated' "$RUN/n3.log" | tail -1 | sed 's/^.*generated/ /'
echo
echo "prompt:          $PROMPT"
echo "swarm output:    $swarm_text"
echo "single process:  $single_text"
if [ "$swarm_text" = "$single_text" ]; then
	echo "the swarm's tokens equal the single-process run (the model is random, so the text is too)"
else
	echo "MISMATCH between the swarm and the single-process run" >&2
	exit 1
fi
