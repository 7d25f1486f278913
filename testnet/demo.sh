#!/usr/bin/env bash
# The main job (`make run`): a small local swarm on a generated model
# answering a real request. Three `strata node` processes on loopback, each
# capped at half the model's layers so that every path has two hops. A
# request goes to the third node's OpenAI-compatible API; its answer is
# checked against a single-process run of the same model. Then one node is
# drained with SIGTERM and a second request shows the swarm still serving.
# Everything lives under one run directory; the script stops exactly the
# processes it started.
set -euo pipefail
BIN=${BIN:-bin/strata}
RUN=${RUN:-$(mktemp -d -t strata-demo.XXXXXX)}
PORT=${PORT:-4301}
API=${API:-$((PORT + 100))}
PROMPT=${PROMPT:-Once upon a time}
TOKENS=${TOKENS:-24}
pids=()
cleanup() {
	# A second signal ends a node's drain at once.
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 0.2
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
		--api "127.0.0.1:$((port + 100))" --max-layers 4 --threads 1 --log-peers 0 "$@" \
		>"$RUN/$name.out" 2>"$RUN/$name.log" &
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
start n3 $((PORT + 2)) --bootstrap "$boot"
url="http://127.0.0.1:$((API + 2))"

# Ready once the committed map covers every layer.
for _ in $(seq 600); do
	curl -sf "$url/healthz?ready=1" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -sf "$url/healthz?ready=1" >/dev/null || { echo "the swarm did not become ready within 60 s; logs in $RUN" >&2; exit 1; }

ask() { # prints the completion text of a greedy request to node n3's API
	curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"model\": \"strata-random-llama\", \"prompt\": \"$PROMPT\", \"max_tokens\": $TOKENS, \"temperature\": 0}" |
		python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["choices"][0]["text"]); print(json.dumps(r.get("strata", {})), file=sys.stderr)'
}
echo
echo "committed map (from $url/v1/swarm):"
curl -sf "$url/v1/swarm" | python3 -c 'import json,sys
s=json.load(sys.stdin); m=s.get("committed") or {}
print("  epoch", m.get("epoch"), "leader", str(s.get("leader"))[-8:])
for st in m.get("stages", []): print("  ", st["node"][-8:], "[%d,%d)" % (st["start"], st["end"]))'
# Random weights give random tokens, some of them stray bytes that JSON
# carries as U+FFFD; compare and show the printable ASCII of both sides.
printable() { python3 -c 'import sys; t=sys.stdin.buffer.read().decode("utf-8","replace"); print("".join(c for c in t.split("\n")[0] if " " <= c <= "~"))'; }
swarm_text=$(ask 2>"$RUN/ask1.json" | printable)
single_text=$("$BIN" generate --model "$RUN/model.gguf" --prompt "$PROMPT" --max-tokens "$TOKENS" 2>/dev/null | printable)
echo "path and timing: $(cat "$RUN/ask1.json")"
echo
echo "prompt:          $PROMPT"
echo "swarm output:    $swarm_text"
echo "single process:  $single_text"
if [ "$swarm_text" != "$single_text" ]; then
	echo "MISMATCH between the swarm and the single-process run" >&2
	exit 1
fi
echo "the swarm's text equals the single-process run (the model is random, so the text is too)"

# Drain the founder with SIGTERM: the leader moves its layers, and the
# swarm keeps answering.
echo
echo "draining n1 (SIGTERM) ..."
kill -TERM "${pids[0]}"
for _ in $(seq 300); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
after=$(ask 2>/dev/null | printable)
echo "after the drain: $after"
[ "$after" = "$single_text" ] || { echo "the swarm answered differently after the drain" >&2; exit 1; }
echo "same tokens after n1 left: the map was repaired make-before-break"
