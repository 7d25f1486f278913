#!/usr/bin/env bash
# A local testnet: N `strata node` processes on loopback that keep running
# after this script returns. Stop them with testnet/down.sh.
#
#   testnet/up.sh N                      # a generated model, the real engine
#   SIM=llama-3-70b testnet/up.sh N      # a SIMULATED 70B model on a GPU mix
#
# Real engine: a random-weight model from `strata model gen` (LAYERS layers,
# dimension DIM); each node offers at most MAX_LAYERS of them, so every path
# has several hops. Simulated: each node declares a device from GPUS (taken
# in turn); no single one holds the model, so paths have several hops too.
#
# Environment: BIN (bin/strata), RUN (run directory; default a new one under
# ${TMPDIR:-/tmp}), PORT (first libp2p port, 4501), API_PORT (first API
# port, PORT+500), LAYERS (8), DIM (128), MODEL (an existing GGUF file to
# serve instead of generating one; LAYERS must be its layer count),
# MAX_LAYERS, SIM, GPUS, TIMEOUT (seconds to wait for the swarm to serve,
# 120), THREADS (each real-engine node's, 1), NODE_ARGS (more `strata node`
# flags for every node, e.g. "--engine ggml"). It needs nothing but bash and the strata binary. Everything binds to
# 127.0.0.1; logs, data dirs and the pids file live under the run directory.
set -euo pipefail

usage() { echo "usage: [SIM=MODEL] $0 N   (N nodes, 1..64)" >&2; exit 2; }
[ $# -eq 1 ] || usage
N=$1
if ! [[ $N =~ ^[0-9]+$ ]] || [ "$N" -lt 1 ] || [ "$N" -gt 64 ]; then usage; fi

BIN=${BIN:-bin/strata}
PORT=${PORT:-4501}
API_PORT=${API_PORT:-$((PORT + 500))}
LAYERS=${LAYERS:-8}
DIM=${DIM:-128}
SIM=${SIM:-}
GPUS=${GPUS:-a100-80g h100 rtx4090 rtx3090 l40s rtx5090 a100-40g rtx4090}
TIMEOUT=${TIMEOUT:-120}
[ -x "$BIN" ] || { echo "$BIN not found: run 'make build' first" >&2; exit 1; }

# Paths of about max(2, N/2) hops with the real engine (each layer held
# about twice over); a simulated node is limited by its device's memory.
if [ -z "${MAX_LAYERS:-}" ]; then
	if [ -n "$SIM" ]; then
		MAX_LAYERS=0
	elif [ "$N" -eq 1 ]; then
		MAX_LAYERS=$LAYERS
	else
		hops=$((N / 2 > 2 ? N / 2 : 2))
		MAX_LAYERS=$(((LAYERS + hops - 1) / hops))
	fi
fi

# Refuse ports something already listens on (a connect to 127.0.0.1 only).
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for i in $(seq 0 $((N - 1))); do
	for p in $((PORT + i)) $((API_PORT + i)); do
		if in_use "$p"; then
			echo "port $p on 127.0.0.1 is in use (another testnet? see testnet/down.sh); set PORT/API_PORT" >&2
			exit 1
		fi
	done
done

RUN=${RUN:-$(mktemp -d "${TMPDIR:-/tmp}/strata-testnet.XXXXXX")}
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
PIDS=$RUN/pids
[ ! -s "$PIDS" ] || { echo "$PIDS exists: that run directory is in use; stop it with testnet/down.sh $RUN" >&2; exit 1; }
: >"$PIDS"

pids=()
ok=
cleanup() {
	[ -z "$ok" ] || return 0
	if [ ${#pids[@]} -gt 0 ]; then
		echo "stopping the ${#pids[@]} node(s) this script started: ${pids[*]}" >&2
		# A second SIGTERM ends a node's drain at once.
		for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
		sleep 0.3
		for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
		wait 2>/dev/null || true
		: >"$PIDS"
	fi
	echo "testnet failed; logs in $RUN" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "run directory: $RUN"
if [ -n "$SIM" ]; then
	echo "model: $SIM, SIMULATED (no weights, no real compute; timings from the device profiles)"
	model_args=(--sim-model "$SIM")
else
	if [ -z "${MODEL:-}" ]; then
		MODEL=$RUN/model.gguf
		"$BIN" model gen --out "$MODEL" --layers "$LAYERS" --dim "$DIM" --heads 4 --kv-heads 2 \
			--ffn $((DIM * 5 / 2)) --seed 7 >"$RUN/model-gen.log" 2>&1 ||
			{ cat "$RUN/model-gen.log" >&2; exit 1; }
		echo "model: generated, $LAYERS layers, dim $DIM, real engine; at most $MAX_LAYERS layers per node"
	else
		[ -f "$MODEL" ] || { echo "MODEL=$MODEL: no such file" >&2; exit 1; }
		MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
		echo "model: $MODEL ($LAYERS layers), real engine; at most $MAX_LAYERS layers per node"
	fi
	model_args=(--model "$MODEL" --threads "${THREADS:-1}")
fi
read -r -a gpus <<<"$GPUS"

start() { # index [extra args...]
	local i=$1 name="n$(($1 + 1))"
	shift
	local args=("${model_args[@]}")
	[ -z "$SIM" ] || args+=(--gpu "${gpus[$((i % ${#gpus[@]}))]}")
	[ -z "${NODE_ARGS:-}" ] || { read -r -a extra <<<"$NODE_ARGS"; args+=("${extra[@]}"); }
	# stdin from /dev/null: the node outlives this script.
	"$BIN" node --data-dir "$RUN/$name" --listen "/ip4/127.0.0.1/tcp/$((PORT + i))" \
		--api "127.0.0.1:$((API_PORT + i))" --max-layers "$MAX_LAYERS" --log-peers 0 "${args[@]}" "$@" \
		</dev/null >"$RUN/$name.out" 2>"$RUN/$name.log" &
	pids+=($!)
	echo "$! $name" >>"$PIDS"
}

alive() { # fails, naming the node and its log, if one of ours has exited
	local i
	for i in "${!pids[@]}"; do
		kill -0 "${pids[$i]}" 2>/dev/null && continue
		echo "node n$((i + 1)) exited; the end of $RUN/n$((i + 1)).log:" >&2
		tail -n 20 "$RUN/n$((i + 1)).log" >&2
		return 1
	done
}

start 0
boot=
for _ in $(seq 200); do
	boot=$(grep -ho "/ip4/127.0.0.1/tcp/$PORT/p2p/[A-Za-z0-9]*" "$RUN/n1.out" "$RUN/n1.log" 2>/dev/null | head -1 || true)
	[ -n "$boot" ] && break
	alive
	sleep 0.1
done
[ -n "$boot" ] || { echo "node n1 printed no address within 20 s; see $RUN/n1.log" >&2; exit 1; }
echo "founder n1: $boot"
for i in $(seq 1 $((N - 1))); do start "$i" --bootstrap "$boot"; done

# Ready once every node's API says the committed map covers every layer.
# A swarm whose nodes cannot hold every layer between them (the node says
# "served by no node") is given up on after 10 s of saying so: every node
# has started, and no map can come.
echo "waiting (up to $TIMEOUT s) for the swarm to serve ..."
deadline=$((SECONDS + TIMEOUT))
for i in $(seq 0 $((N - 1))); do
	uncovered=
	until why=$("$BIN" status --api "http://127.0.0.1:$((API_PORT + i))" --wait 1s 2>&1 >/dev/null); do
		alive
		why=${why#strata: the swarm did not serve within 1s: }
		if [[ $why == *"served by no node"* ]]; then
			uncovered=${uncovered:-$SECONDS}
			[ $((SECONDS - uncovered)) -lt 10 ] || { echo "node n$((i + 1)) cannot serve: $why" >&2; exit 1; }
		else
			uncovered=
		fi
		[ "$SECONDS" -lt "$deadline" ] || { echo "node n$((i + 1)) not ready within $TIMEOUT s: $why" >&2; exit 1; }
	done
done
url="http://127.0.0.1:$API_PORT"
echo "$url" >"$RUN/api"
# Each node's peer ID (from the address it printed), to show the map's
# stages as n1..nN; RUN/names keeps them for `strata status --name`.
: >"$RUN/names"
for i in $(seq 0 $((N - 1))); do
	id=$(grep -ho "/p2p/12D3KooW[A-Za-z0-9]*" "$RUN/n$((i + 1)).out" "$RUN/n$((i + 1)).log" 2>/dev/null | head -1 | cut -d/ -f3 || true)
	[ -z "$id" ] || echo "$id=n$((i + 1))" >>"$RUN/names"
done
ok=1
# down.sh with no argument stops the latest run.
echo "$RUN" >"${TMPDIR:-/tmp}/strata-testnet.last"

echo
echo "the swarm serves ($N nodes). APIs (any one serves the whole swarm):"
for i in $(seq 0 $((N - 1))); do
	echo "  n$((i + 1))  http://127.0.0.1:$((API_PORT + i))   pid ${pids[$i]}   log $RUN/n$((i + 1)).log"
done
echo
echo "swarm map (strata status --api $url):"
names=()
while read -r kv; do names+=(--name "$kv"); done <"$RUN/names"
"$BIN" status --api "$url" "${names[@]}" | sed 's/^/  /' || true
echo
echo "chat:   $BIN chat --api $url"
echo "stop:   bash testnet/down.sh $RUN"
