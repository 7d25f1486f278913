#!/usr/bin/env bash
# The GPU check (issue 31): what a Linux host with an NVIDIA GPU, CUDA's
# compiler (nvcc) and CMake runs to measure Strata's ggml engine on its
# GPU. It needs no Go and no network: it runs from the bundle `make
# gpu-bundle` writes (bin/gpu-bundle.tar.gz: stripped binaries linked
# against llama.cpp's release of ggml, that release's prebuilt libraries
# in lib/ and its ggml sources in ggml-src/, this script), unpacked
# anywhere:
#
#   tar xzf gpu-bundle.tar.gz && gpu-bundle/gpu-check.sh
#
# Steps, each timed, then a table (and OUT/report.txt):
#   1. builds ggml's CUDA backend (libggml-cuda.so) from the release's
#      sources with CMake, for this GPU's architecture only (CUDA_ARCH,
#      default native), as a library the release's registry loads (beside
#      the release's own libggml-base.so, which it must link by that name);
#   2. measures the GPU's memory bandwidth by a device-to-device copy (a
#      small CUDA program, compiled here by nvcc);
#   3. writes an 8B-shaped Q4_K_M file (Llama-3-8B's shape, 4.9 GB; in the
#      background from the start, beside steps 1-2) and a small one with
#      `strata model gen`;
#   4. decode tok/s at batch 1 and 16 (ggml-bench), set against the
#      bandwidth: the weights a decode step reads over the step's time;
#   5. prefill of a 512-token prompt;
#   6. a 2-process pipeline (two nodes on the one GPU, half the layers
#      each, over libp2p on loopback) against one node holding them all,
#      through the API (testnet/up.sh, `strata chat`);
#   7. the small file's logits on the GPU against the pure-Go engine's,
#      within the bound engine/ggml's tests hold quantized files to.
# It exits non-zero if any step fails.
#
# --build-only runs step 1 and compiles step 2's program, checks that every
# symbol libggml-cuda.so needs resolves (ldd -r) and that ggml-bench loads
# it, and stops: what a machine with nvcc but no GPU can check (make
# gpu-check-build).
#
# --dry-run rehearses it on the CPU device (ggml's CPU backend): every step
# but the CUDA build; the bandwidth is the host's memory bandwidth (a
# buffer copy), and the big file has TinyLlama's shape (1.1B) rather than
# 8B's unless SHAPE=8b, as 8B on 2 CPU cores would take far longer than
# the check's 9 minutes.
#
# Environment: OUT (work directory: ./gpu-check-out; bin/gpu-check in the
# repository), CUDA_ARCH
# (native), SHAPE (8b; tiny in --dry-run), THREADS (CPU threads: 2 in
# --dry-run, else all), STEPS (decode steps timed: 64, 16 in --dry-run), PORT (first
# libp2p port of the pipeline's nodes, 4701), KEEP=1 keeps the model files.
set -euo pipefail

DRY=
BUILD_ONLY=
for a in "$@"; do
	case $a in
	--dry-run) DRY=1 ;;
	--build-only) BUILD_ONLY=1 ;;
	-h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
	*) echo "gpu-check: unknown argument $a (--dry-run, --build-only, --help)" >&2; exit 2 ;;
	esac
done
[ -z "$DRY" ] || [ -z "$BUILD_ONLY" ] || { echo "gpu-check: --dry-run and --build-only exclude each other (the dry run skips the build)" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")" && pwd)
# In the bundle the binaries are in HERE/bin; in the repository, bin/gpu-bundle/bin.
BINDIR=${BINDIR:-}
for d in "$HERE/bin" "$HERE/../bin/gpu-bundle/bin"; do
	[ -n "$BINDIR" ] || { [ -x "$d/strata-ggml" ] && BINDIR=$(cd "$d" && pwd); } || true
done
[ -n "$BINDIR" ] || { echo "gpu-check: no strata-ggml beside this script (bin/) nor in bin/gpu-bundle/bin: run make gpu-bundle" >&2; exit 1; }
SRC=${SRC:-}
for d in "$HERE/ggml-src" "$HERE/../bin/gpu-bundle/ggml-src"; do
	[ -n "$SRC" ] || { [ -f "$d/ggml/CMakeLists.txt" ] && SRC=$(cd "$d" && pwd); } || true
done
STRATA=$BINDIR/strata-ggml
BENCH=$BINDIR/ggml-bench
CHECK=$BINDIR/ggml-check
# In the repository, bin/gpu-check (ignored by git); in the bundle, ./gpu-check-out.
if [ -z "${OUT:-}" ] && [ -f "$HERE/../go.mod" ]; then OUT=$HERE/../bin/gpu-check; fi
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CUDA_ARCH=${CUDA_ARCH:-native}
if [ -n "$DRY" ]; then STEPS=${STEPS:-16}; else STEPS=${STEPS:-64}; fi
if [ -n "$DRY" ]; then THREADS=${THREADS:-2}; else THREADS=${THREADS:-$(nproc)}; fi
PORT=${PORT:-4701}
if [ -n "$DRY" ]; then SHAPE=${SHAPE:-tiny}; else SHAPE=${SHAPE:-8b}; fi
REPORT=$OUT/report.txt
: >"$REPORT"
T0=$SECONDS

say() { echo "$*" | tee -a "$REPORT"; }
die() { say "gpu-check: FAILED: $*"; exit 1; }
step() { say; say "== $* ($((SECONDS - T0)) s in)"; }
# json FIELD <<<'{...}': a number or string field of one line of JSON.
json() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
# num X: X with two decimals.
num() { awk -v x="$1" 'BEGIN { printf "%.2f", x }'; }

rows=()
row() { rows+=("$(printf '%-44s %s' "$1" "$2")"); }

say "gpu-check $([ -n "$DRY" ] && echo "--dry-run (CPU device; no CUDA build)")$([ -n "$BUILD_ONLY" ] && echo "--build-only") on $(uname -n), $(date -u +%FT%TZ)"
say "binaries: $BINDIR; work directory: $OUT"

# The big file is written in the background, beside the CUDA build (it
# took 154 s for the 8B shape on this project's loaded 2-core VM).
case $SHAPE in
8b) shape=(--layers 32 --dim 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256) ;;
tiny) shape=(--layers 22 --dim 2048 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000) ;;
*) die "SHAPE=$SHAPE: 8b or tiny" ;;
esac
LAYERS=${shape[1]}
BIG=$OUT/model-$SHAPE-q4_k_m.gguf
SMALL=$OUT/model-small-q4_k_m.gguf
GENPID=
GEN0=$SECONDS
if [ -z "$BUILD_ONLY" ] && [ ! -s "$BIG" ]; then
	"$STRATA" model gen --out "$BIG.tmp" --dtype q4_k_m --seed 31 "${shape[@]}" >"$OUT/gen.log" 2>&1 &
	GENPID=$!
fi
trap '[ -z "$GENPID" ] || kill "$GENPID" 2>/dev/null || true' EXIT

# 1. ggml's CUDA backend.
step "1. ggml-cuda (CMake, CUDA_ARCH=$CUDA_ARCH)"
LIBDIR=
DEVICE=gpu
if [ -n "$DRY" ]; then
	say "skipped (--dry-run): the measurements run on ggml's CPU device with $THREADS threads"
	DEVICE=cpu
	row "ggml-cuda build" "skipped (dry run)"
else
	command -v cmake >/dev/null || die "cmake not found"
	command -v nvcc >/dev/null || die "nvcc (the CUDA toolkit) not found"
	command -v readelf >/dev/null || die "readelf (binutils) not found: it checks the built library's NEEDED"
	command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$REPORT" || true
	[ -n "$SRC" ] || die "no ggml sources (ggml-src/) beside this script"
	t=$SECONDS
	# ggml as llama.cpp builds it, a subdirectory (llama.cpp's copy lacks
	# the files of ggml's standalone build): a backend library for the
	# registry to load (GGML_BACKEND_DL), whose soname references are
	# unversioned, as the release's are.
	mkdir -p "$OUT/ggml-cuda-src"
	printf '%s\n' 'cmake_minimum_required(VERSION 3.14)' 'project(strata-ggml-cuda C CXX)' \
		"add_subdirectory(\"$SRC/ggml\" ggml)" >"$OUT/ggml-cuda-src/CMakeLists.txt"
	cmake -S "$OUT/ggml-cuda-src" -B "$OUT/build-cuda" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
		-DGGML_CUDA=ON -DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF \
		-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON \
		>"$OUT/cmake-configure.log" 2>&1 || { tail -n 30 "$OUT/cmake-configure.log"; die "cmake configure (see $OUT/cmake-configure.log)"; }
	cmake --build "$OUT/build-cuda" --target ggml-cuda -j "$(nproc)" >"$OUT/cmake-build.log" 2>&1 ||
		{ tail -n 30 "$OUT/cmake-build.log"; die "the ggml-cuda build (see $OUT/cmake-build.log)"; }
	# The backend alone in LIBDIR: the release's libggml-base.so, already
	# loaded by the binaries, serves it (its NEEDED names that soname).
	LIBDIR=$OUT/lib-cuda
	mkdir -p "$LIBDIR"
	cp "$OUT/build-cuda/bin/libggml-cuda.so" "$LIBDIR/" || die "no libggml-cuda.so in $OUT/build-cuda/bin"
	readelf -d "$LIBDIR/libggml-cuda.so" | grep -q 'NEEDED.*\[libggml-base\.so\]' ||
		die "libggml-cuda.so does not need libggml-base.so by that name (readelf -d): it would not share the release's"
	say "built in $((SECONDS - t)) s: $LIBDIR"
	row "ggml-cuda build" "$((SECONDS - t)) s on $(nproc) cores"
fi
libargs=()
nodeargs=(--engine ggml)
if [ -n "$LIBDIR" ]; then
	libargs=(-lib-dir "$LIBDIR")
	nodeargs+=(--ggml-lib-dir "$LIBDIR")
fi

# 2. Memory bandwidth.
step "2. memory bandwidth"
if [ -n "$DRY" ]; then
	line=$("$BENCH" membw -mib 1024 -runs 5) || die "ggml-bench membw"
	BW=$(json gb_s <<<"$line")
	say "host memory, one buffer copy (read + write): $BW GB/s (the CPU device's yardstick; a GPU's is its device-to-device copy)"
	row "memory bandwidth (host copy, dry run)" "$BW GB/s"
else
	cat >"$OUT/d2d.cu" <<'EOF'
// Device-to-device copy bandwidth: the best of 20 copies of 1 GiB,
// counting the bytes read and written.
#include <cstdio>
#include <cuda_runtime.h>
int main() {
	const size_t n = 1ull << 30;
	void *a, *b;
	if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
	cudaMemset(a, 1, n);
	cudaEvent_t s, e;
	cudaEventCreate(&s);
	cudaEventCreate(&e);
	cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
	float best = 1e30f;
	for (int i = 0; i < 20; i++) {
		cudaEventRecord(s);
		cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
		cudaEventRecord(e);
		cudaEventSynchronize(e);
		float ms;
		cudaEventElapsedTime(&ms, s, e);
		if (ms < best) best = ms;
	}
	if (cudaGetLastError() != cudaSuccess) { fprintf(stderr, "CUDA error\n"); return 1; }
	printf("{\"bytes\": %zu, \"seconds\": %.6f, \"gb_s\": %.2f}\n", 2 * n, best / 1e3, 2.0 * n / (best / 1e3) / 1e9);
	return 0;
}
EOF
	nvcc -O2 -o "$OUT/d2d" "$OUT/d2d.cu" >"$OUT/d2d.log" 2>&1 || { cat "$OUT/d2d.log"; die "nvcc d2d.cu"; }
	if [ -n "$BUILD_ONLY" ]; then
		# Every symbol the backend needs must resolve: ggml's from the
		# release's prebuilt libggml-base.so (the bundle's lib/, as in the
		# binaries' processes), CUDA's from the toolkit's libraries (and
		# the driver's, on a host without one from LD_LIBRARY_PATH).
		LD_LIBRARY_PATH="$BINDIR/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd -r "$LIBDIR/libggml-cuda.so" >"$OUT/ldd.log" 2>&1 ||
			{ cat "$OUT/ldd.log"; die "ldd -r libggml-cuda.so"; }
		! grep -E 'undefined symbol|not found' "$OUT/ldd.log" || die "libggml-cuda.so has unresolved symbols or libraries (see $OUT/ldd.log)"
		grep -q "libggml-base.so => $BINDIR/../lib/" "$OUT/ldd.log" || die "ldd -r did not resolve libggml-base.so to the release's (see $OUT/ldd.log)"
		say "d2d.cu compiled; every symbol of libggml-cuda.so resolves ($(grep -c '=>' "$OUT/ldd.log") libraries)"
		row "d2d.cu, ldd -r libggml-cuda.so" "compiled; resolves"
		# The bundle's binary must load the backend built from the bundle's
		# sources (without a GPU it then finds no device).
		"$STRATA" model gen --out "$SMALL" --dtype q4_k_m --seed 7 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --layers 2 \
			--vocab 1024 >"$OUT/gen.log" 2>&1 || { cat "$OUT/gen.log"; die "model gen (load check)"; }
		"$BENCH" measure -model "$SMALL" -device gpu -lib-dir "$LIBDIR" -threads 1 -mode decode -steps 2 >"$OUT/load.log" 2>&1 || true
		rm -f "$SMALL"
		grep -q 'loaded CUDA backend' "$OUT/load.log" || { cat "$OUT/load.log"; die "ggml-bench did not load $LIBDIR/libggml-cuda.so"; }
		dev=$(grep -q '"tok_s"' "$OUT/load.log" && echo "decoded on the GPU" ||
			sed -n 's/^ggml_cuda_init: //p;s/.*ggml failed: //p' "$OUT/load.log" | sed ':a;N;$!ba;s/\n/; /g')
		say "ggml-bench loaded libggml-cuda.so: $dev"
		row "ggml-bench -device gpu" "loaded libggml-cuda.so; $dev"
		say
		say "== gpu-check --build-only: passed in $((SECONDS - T0)) s"
		for r in "${rows[@]}"; do say "  $r"; done
		exit 0
	fi
	line=$("$OUT/d2d") || die "the device-to-device copy"
	BW=$(json gb_s <<<"$line")
	say "device-to-device copy (read + write): $BW GB/s"
	row "memory bandwidth (GPU d2d copy)" "$BW GB/s"
fi

# 3. The model files.
step "3. model files (strata model gen)"
if [ -n "$GENPID" ]; then
	wait "$GENPID" || { cat "$OUT/gen.log"; die "model gen $SHAPE"; }
	GENPID=
	mv "$BIG.tmp" "$BIG"
	tee -a "$REPORT" <"$OUT/gen.log"
	say "the $SHAPE-shaped file: written in $((SECONDS - GEN0)) s, beside steps 1-2"
fi
row "gen $SHAPE-shaped Q4_K_M (beside the build)" "$((SECONDS - GEN0)) s, $(($(stat -c %s "$BIG") >> 20)) MiB"
t=$SECONDS
# engine/ggml's ggml-check shape (docs/ggml.md): 1024 wide, 4 layers.
[ -s "$SMALL" ] || "$STRATA" model gen --out "$SMALL" --dtype q4_k_m --seed 7 --dim 1024 --heads 16 --kv-heads 8 --ffn 3072 \
	--layers 4 --vocab 4096 2>&1 | tee -a "$REPORT" || die "model gen small"
say "generated in $((SECONDS - t)) s (small)"

# 4-5. Decode and prefill through ggml-bench, one process each.
measure() { # mode extra-args...: prints tok_s
	local mode=$1 line
	shift
	line=$("$BENCH" measure -model "$BIG" -device "$DEVICE" "${libargs[@]}" -threads "$THREADS" -mode "$mode" "$@" 2>>"$OUT/bench.log") ||
		{ tail -n 5 "$OUT/bench.log" >&2; return 1; }
	echo "$line" >>"$OUT/bench.jsonl"
	echo "$line"
}
step "4. decode, batch 1 and 16 ($STEPS steps)"
line=$(measure decode -steps "$STEPS" -prompt 16) || die "decode"
D1=$(num "$(json tok_s <<<"$line")")
WB=$(json weight_bytes <<<"$line")
ENG=$(json engine <<<"$line")
[ "$DEVICE" = cpu ] || [ "$ENG" != ggml-CPU ] || die "the stage ran on ggml's CPU device: libggml-cuda did not load from $LIBDIR"
say "$ENG decode batch 1: $D1 tok/s; $WB bytes of weights"
line=$(measure batch16 -steps "$STEPS" -prompt 16) || die "batch16"
D16=$(num "$(json tok_s <<<"$line")")
say "$ENG decode batch 16: $D16 tok/s in aggregate"
# A decode step reads every weight once (batch 16: once for 16 tokens).
eff() { awk -v t="$1" -v w="$WB" -v b="$BW" -v k="$2" 'BEGIN { g = t / k * w / 1e9; printf "%.1f GB/s of weights read, %.0f%% of %s GB/s", g, 100 * g / b, b }'; }
row "decode batch 1 ($ENG)" "$D1 tok/s ($(eff "$D1" 1))"
row "decode batch 16, aggregate" "$D16 tok/s ($(eff "$D16" 16))"

step "5. prefill, 512 tokens"
line=$(measure prefill -tokens 512) || die "prefill"
P=$(num "$(json tok_s <<<"$line")")
say "$ENG prefill 512: $P tok/s"
row "prefill 512 tokens" "$P tok/s"

# 6. Two nodes on the one GPU against one, through the API.
step "6. pipeline: 2 processes (half the layers each) against 1"
pipeline() { # nodes port: prints the decode tok/s of one completion
	local n=$1 port=$2 run=$OUT/testnet-$1 out api
	rm -rf "$run"
	BIN=$STRATA RUN=$run MODEL=$BIG LAYERS=$LAYERS MAX_LAYERS=$(((LAYERS + n - 1) / n)) PORT=$port API_PORT=$((port + 100)) \
		TIMEOUT=${NODE_TIMEOUT:-240} NODE_ARGS="${nodeargs[*]}" THREADS=$THREADS bash "$HERE/up.sh" "$n" \
		>"$run.log" 2>&1 || { tail -n 20 "$run.log" >&2; bash "$HERE/down.sh" "$run" >/dev/null 2>&1 || true; return 1; }
	api=http://127.0.0.1:$((port + 100))
	# Off the dry run every node must compute on the GPU, not ggml's CPU device.
	if [ -z "$DRY" ] && grep -q '"engine": "ggml-CPU"' "$run"/n*.log; then
		echo "a node took ggml's CPU device (see $run/n*.log)" >&2
		bash "$HERE/down.sh" "$run" >/dev/null 2>&1 || true
		return 1
	fi
	# A warm-up request, then the timed one.
	"$STRATA" chat --api "$api" --mode completion --temperature 0 --max-tokens 8 --message "Once upon a time" >/dev/null 2>>"$run.log" &&
		out=$("$STRATA" chat --api "$api" --mode completion --temperature 0 --max-tokens "$STEPS" --message "Once upon a time" 2>>"$run.log")
	local rc=$?
	bash "$HERE/down.sh" "$run" >/dev/null 2>&1 || true
	[ $rc -eq 0 ] || return 1
	echo "$out" >>"$run.log"
	# speed: P prompt + C completion tokens in TOOK (R tokens/s), first token after TTFT
	awk '/^speed:/ {
		c = $5; took = dur($9); ttft = dur($NF)
		if (c > 1 && took > ttft) printf "%.2f %d\n", (c - 1) / (took - ttft), c; else printf "0 %d\n", c
	}
	function dur(s,   v) { v = s + 0; if (s ~ /ms$/) return v / 1e3; if (s ~ /µs$|us$/) return v / 1e6; if (s ~ /m[0-9]/) { split(s, a, "m"); return a[1] * 60 + a[2] } return v }' <<<"$out"
}
r1=$(pipeline 1 "$PORT") || die "the one-node run (logs under $OUT/testnet-1)"
r2=$(pipeline 2 $((PORT + 10))) || die "the two-node run (logs under $OUT/testnet-2)"
say "one node: ${r1% *} tok/s decode over ${r1#* } tokens; two nodes: ${r2% *} tok/s over ${r2#* } tokens"
row "node decode, 1 process (all $LAYERS layers)" "${r1% *} tok/s (${r1#* } tokens, through the API)"
row "node decode, 2 processes (pipeline)" "${r2% *} tok/s (${r2#* } tokens), $(awk -v a="${r1% *}" -v b="${r2% *}" 'BEGIN { if (a > 0) printf "%.2f× one process", b / a; else print "-" }')"

# 7. Logits against the pure-Go engine.
step "7. logits on the small file vs the pure-Go engine"
"$CHECK" -model "$SMALL" -device "$DEVICE" "${libargs[@]}" -threads "$THREADS" -prompt 64 -decode 8 -ref >"$OUT/logits.txt" 2>&1 ||
	{ cat "$OUT/logits.txt"; die "ggml-check"; }
tee -a "$REPORT" <"$OUT/logits.txt"
verdict=$(sed -n 's/.*ggml vs pure-Go \([^ ]*\) within .* = \([^:]*\): \(true\|false\)$/\1 \2 \3/p' "$OUT/logits.txt")
[ -n "$verdict" ] || die "ggml-check printed no verdict"
set -- $verdict
row "logits vs pure-Go (small Q4_K_M)" "$1 relative, bound $2: $([ "$3" = true ] && echo ok || echo OVER)"
[ "$3" = true ] || die "ggml's logits are further from the pure-Go engine's than the bound"

[ -n "${KEEP:-}" ] || rm -f "$BIG" "$SMALL"
say
say "== gpu-check: $([ -n "$DRY" ] && echo "dry run, CPU device" || echo "$ENG") — passed in $((SECONDS - T0)) s"
for r in "${rows[@]}"; do say "  $r"; done
say "report: $REPORT"
