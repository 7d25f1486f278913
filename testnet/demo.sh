#!/usr/bin/env bash
# The main job (`make run`): a small local swarm on a generated model,
# answering a real request, left running.
#
# It generates a random-weight model once (bin/demo-model.gguf), starts
# three `strata node` processes on loopback through testnet/up.sh (each
# offering half the layers, so every path has two hops), sends one chat
# completion through the third node's OpenAI-compatible API, prints the
# answer, the path it took and its speed, and checks the tokens against a
# single-process run of the same model. The swarm keeps running; the last
# lines say where it is and how to stop it. A second `make run` stops the
# first one's swarm before it starts anew. Needs only bash and the binary.
set -euo pipefail
BIN=${BIN:-bin/strata}
RUN=${RUN:-bin/run}
MODEL=${MODEL:-bin/demo-model.gguf}
PORT=${PORT:-4301}
API_PORT=${API_PORT:-4401}
PROMPT=${PROMPT:-Tell me a story about a lighthouse.}
TOKENS=${TOKENS:-24}

if [ -s "$RUN/pids" ]; then
	echo "stopping the swarm of the previous make run ($RUN)"
	bash testnet/down.sh "$RUN" >/dev/null || true
fi
rm -rf "$RUN"
if [ ! -f "$MODEL" ]; then
	echo "generating a random-weight Q4_K_M model (llama.cpp's mix of Q4_K and Q6_K): $MODEL"
	"$BIN" model gen --out "$MODEL" --layers 8 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --dtype q4_k_m --seed 7 >/dev/null
fi

BIN=$BIN RUN=$RUN MODEL=$MODEL LAYERS=8 MAX_LAYERS=4 PORT=$PORT API_PORT=$API_PORT bash testnet/up.sh 3
url="http://127.0.0.1:$((API_PORT + 2))" # the third node's API: its request crosses the swarm
names=()
while read -r kv; do names+=(--name "$kv"); done <"$RUN/names"

echo
echo "one chat completion through $url/v1/chat/completions (greedy, at most $TOKENS tokens):"
echo "prompt: $PROMPT"
"$BIN" chat --api "$url" --message "$PROMPT" --temperature 0 --max-tokens "$TOKENS" "${names[@]}" | tee "$RUN/answer.txt"

# The same request in one process. The weights are random, so the text is
# too, with stray bytes that JSON carries as U+FFFD: compare the printable
# ASCII of both.
printable() { LC_ALL=C tr -cd '[:print:]'; }
swarm=$(sed -n '/^path: /q;p' "$RUN/answer.txt" | sed '1s/^answer: //' | printable)
single=$("$BIN" generate --model "$MODEL" --chat --prompt "$PROMPT" --max-tokens "$TOKENS" 2>/dev/null | printable)
if [ "$swarm" != "$single" ]; then
	echo "MISMATCH: the swarm answered differently from a single-process run:" >&2
	echo "  swarm:  $swarm" >&2
	echo "  single: $single" >&2
	exit 1
fi
echo "the swarm's answer equals a single-process run of the same model (a random model: random text)"

echo
echo "the swarm keeps running:"
echo "  API and dashboard: http://127.0.0.1:$API_PORT/  (any node's; $url too)"
echo "  chat:              $BIN chat --api http://127.0.0.1:$API_PORT"
echo "  map:               $BIN status --api http://127.0.0.1:$API_PORT"
echo "  stop it:           make stop   (or: bash testnet/down.sh $RUN)"
