#!/usr/bin/env bash
# The main job (`make run`): a small local swarm on a real, trained model,
# answering a real request, left running.
#
# It serves testdata/models/stories260K.gguf (llama2.c's 260K-parameter
# TinyStories model: 5 layers, English children's stories, no chat
# template; see testdata/models/README.md) on three `strata node`
# processes on loopback through testnet/up.sh, each offering at most 3
# layers so that every path has at least two hops. It asks the third
# node's OpenAI-compatible API (strata chat --message, which uses plain
# completion, /v1/completions, for a model without a chat template) to
# continue "Once upon a time" greedily, prints the story, the path it took
# and its speed, and checks the text against a single-process run of the
# same model (strata generate) and, where the model ships a published
# greedy sample (MODEL's .greedy.txt) that the prompt begins, against that.
# The swarm keeps running; the last lines say where it is and how to stop
# it. A second `make run` stops the first one's swarm before it starts
# anew. Needs only bash and the binary.
#
# MODEL=random runs it on a generated random-weight Q4_K_M model instead
# (RANDOM_MODEL, generated once; a shape no shipped model has), with a chat
# completion: its text is random bytes, compared as printable ASCII.
# MODEL=FILE serves any other GGUF file.
set -euo pipefail
BIN=${BIN:-bin/strata}
RUN=${RUN:-bin/run}
MODEL=${MODEL:-testdata/models/stories260K.gguf}
RANDOM_MODEL=${RANDOM_MODEL:-bin/demo-q4_k_m.gguf}
PORT=${PORT:-4301}
API_PORT=${API_PORT:-4401}
random=
if [ "$MODEL" = random ]; then
	random=1
	MODEL=$RANDOM_MODEL
	PROMPT=${PROMPT:-Tell me a story about a lighthouse.}
	TOKENS=${TOKENS:-24}
fi
PROMPT=${PROMPT:-Once upon a time}
TOKENS=${TOKENS:-100}

if [ -s "$RUN/pids" ]; then
	echo "stopping the swarm of the previous make run ($RUN)"
	bash testnet/down.sh "$RUN" >/dev/null || true
fi
rm -rf "$RUN"
if [ -n "$random" ] && [ ! -f "$MODEL" ]; then
	echo "generating a random-weight Q4_K_M model (llama.cpp's mix of Q4_K and Q6_K): $MODEL"
	"$BIN" model gen --out "$MODEL" --layers 8 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --dtype q4_k_m --seed 7 >/dev/null
fi
[ -f "$MODEL" ] || { echo "MODEL=$MODEL: no such file" >&2; exit 1; }
layers=$("$BIN" model inspect "$MODEL" | sed -n 's/^  layers \([0-9]*\),.*/\1/p')
[ -n "$layers" ] || { echo "$MODEL: strata model inspect gave no layer count" >&2; exit 1; }
# At most half the layers per node, rounded up (3 of stories260K's 5, 4
# of the random model's 8): every path has two hops or more.
max=$(((layers + 1) / 2))

BIN=$BIN RUN=$RUN MODEL=$MODEL LAYERS=$layers MAX_LAYERS=$max PORT=$PORT API_PORT=$API_PORT bash testnet/up.sh 3
url="http://127.0.0.1:$((API_PORT + 2))" # the third node's API: its request crosses the swarm
names=()
while read -r kv; do names+=(--name "$kv"); done <"$RUN/names"

echo
echo "one request through $url (greedy, at most $TOKENS tokens):"
echo "prompt: $PROMPT"
"$BIN" chat --api "$url" --message "$PROMPT" --temperature 0 --max-tokens "$TOKENS" "${names[@]}" | tee "$RUN/answer.txt"

# The same request in one process. strata chat printed "text:" (the
# prompt and its continuation) for a plain completion, "answer:" for a
# chat; generate prints only what the model wrote.
swarm=$(sed -n '/^path: /q;p' "$RUN/answer.txt")
chat=()
case "$swarm" in
"text: $PROMPT"*) swarm=${swarm#"text: $PROMPT"} ;;
"answer: "*)
	swarm=${swarm#"answer: "}
	chat=(--chat)
	;;
*) echo "unexpected output of strata chat: see $RUN/answer.txt" >&2; exit 1 ;;
esac
single=$("$BIN" generate --model "$MODEL" "${chat[@]}" --prompt "$PROMPT" --max-tokens "$TOKENS" 2>/dev/null)
if [ -n "$random" ]; then
	# Random weights give random text, with stray bytes that JSON carries
	# as U+FFFD: compare the printable ASCII of both.
	printable() { LC_ALL=C tr -cd '[:print:]'; }
	swarm=$(printf '%s' "$swarm" | printable)
	single=$(printf '%s' "$single" | printable)
fi
if [ "$swarm" != "$single" ]; then
	echo "MISMATCH: the swarm answered differently from a single-process run:" >&2
	echo "  swarm:  $swarm" >&2
	echo "  single: $single" >&2
	exit 1
fi
if [ -n "$random" ]; then
	echo "the swarm's answer equals a single-process run of the same model (a random model: random text)"
else
	echo "the swarm's text equals a single-process run of the same model"
fi
# The model's published greedy sample, an oracle that is not Strata's own.
sample=${MODEL%.gguf}.greedy.txt
published=
[ ! -f "$sample" ] || published=$(<"$sample")
if [ ${#chat[@]} -eq 0 ] && [[ -n $published && $published == "$PROMPT"* ]]; then
	if [[ $published != "$PROMPT$swarm"* ]]; then
		echo "MISMATCH: the text is not the start of the published greedy sample $sample" >&2
		exit 1
	fi
	echo "and it is the start of the model's published greedy sample ($sample)"
fi

echo
echo "the swarm keeps running:"
echo "  API and dashboard: http://127.0.0.1:$API_PORT/  (any node's; $url too)"
echo "  chat:              $BIN chat --api http://127.0.0.1:$API_PORT"
echo "  map:               $BIN status --api http://127.0.0.1:$API_PORT"
echo "  stop it:           make stop   (or: bash testnet/down.sh $RUN)"
