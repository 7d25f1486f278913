# Strata. `make run` and `make test` are the two commands a fresh machine needs.
GO            ?= go
BIN           := bin
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.7.0
TOOLS         := $(CURDIR)/$(BIN)/tools
PKGS          := ./...
TEST_TIMEOUT  ?= 15m

.PHONY: all build test test-faultinject test-refcheck npm-deps debs lint bench run stop testnet plan fuzz clean soak exhaust flakehunt \
	test-ggml build-ggml build-ggml-release test-ggml-release bench-ggml bench-ggml-llamacpp build-cuda build-vulkan debs-vulkan test-vulkan test-vulkan-run test-vulkan-release test-vulkan-release-run bench-llamacpp handovers fuzz-long \
	nemesis nemesis-broken gpu-bundle gpu-check-dry gpu-check-build debs-need

all: build

build:
	$(GO) build -o $(BIN)/strata ./cmd/strata

# The main job: a three-node swarm on loopback serving the shipped trained
# model (testdata/models/stories260K.gguf), continuing "Once upon a time"
# through /v1/completions (checked against a single-process run and
# llama2.c's published sample) and left running; `make stop` stops it.
# DEMO_MODEL=random: a generated random-weight Q4_K_M model instead
# (bin/demo-q4_k_m.gguf, once), answering a chat completion.
DEMO_MODEL ?= testdata/models/stories260K.gguf
run: build
	BIN=$(BIN)/strata RUN=$(BIN)/run MODEL=$(DEMO_MODEL) RANDOM_MODEL=$(BIN)/demo-q4_k_m.gguf bash testnet/demo.sh

stop:
	bash testnet/down.sh $(BIN)/run

# A local testnet of N nodes that keeps running (SIM=llama-3-70b for a
# simulated model); testnet/down.sh stops it.
N ?= 3
testnet: build
	BIN=$(BIN)/strata bash testnet/up.sh $(N)

# Every scenario of testdata/testnet through `strata testnet run`, reports
# under bin/soak/. Each runs on the binary it needs: a scenario with a
# lying node (fault:) on a -tags faultinject build, one with ggml nodes
# (engine: ggml) on bin/strata-ggml, which needs cgo and a C compiler;
# where that cannot be built the scenario is skipped, saying why. So is a
# scenario that needs network namespaces where there is no root (exit
# status 3). SOAK=GLOB picks scenarios by name.
SOAK ?= *
soak: build debs
	@mkdir -p $(BIN)/soak; fail=0; \
	$(GO) build -tags faultinject -o $(BIN)/strata-fi ./cmd/strata || exit 1; \
	ggml=; $(MAKE) --no-print-directory build-ggml >$(BIN)/soak/build-ggml.log 2>&1 || \
		ggml="bin/strata-ggml did not build (cgo and a C compiler needed; see $(BIN)/soak/build-ggml.log)"; \
	for f in testdata/testnet/$(SOAK).yaml; do \
		name=$$(basename $$f .yaml); echo "== $$name"; \
		rm -rf $(BIN)/soak/$$name; bin=$(BIN)/strata; \
		if grep -q '^ *- {.*fault:' $$f; then bin=$(BIN)/strata-fi; fi; \
		if grep -q 'engine: ggml' $$f; then \
			if [ -n "$$ggml" ]; then echo "== $$name: SKIPPED ($$ggml)"; continue; fi; \
			bin=$(BIN)/strata-ggml; \
		fi; \
		$$bin testnet run $$f --bin $$bin --run-dir $(BIN)/soak/$$name --report $(BIN)/soak/$$name.md; \
		rc=$$?; \
		if [ $$rc -eq 3 ]; then echo "== $$name: SKIPPED (its network cannot run here: see above)"; \
		elif [ $$rc -ne 0 ]; then echo "== $$name: FAILED"; fail=1; \
		else echo "== $$name: passed ($$(basename $$bin))"; fi; \
	done; exit $$fail

# The nemesis (docs/nemesis.md; needs root): testdata/testnet/nemesis.yaml,
# 10 minutes of seeded faults under streaming load (about 12 minutes in
# all), or NEMESIS=short for nemesis-short.yaml (2 minutes). It fails
# unless the committed maps form one linearizable history and no request
# is wrong, duplicated or lost. Report under bin/nemesis/.
# nemesis-broken runs the short one on a faultinject build that reuses
# map epochs (STRATA_FAULT_EPOCH=reuse) and passes only if the checker
# catches it.
NEMESIS ?=
NEMESIS_FILE = testdata/testnet/nemesis$(if $(NEMESIS),-$(NEMESIS)).yaml
nemesis: build
	@mkdir -p $(BIN)/nemesis; name=$$(basename $(NEMESIS_FILE) .yaml); rm -rf $(BIN)/nemesis/$$name; \
	$(BIN)/strata testnet run $(NEMESIS_FILE) --bin $(BIN)/strata --run-dir $(BIN)/nemesis/$$name --report $(BIN)/nemesis/$$name.md

nemesis-broken:
	$(GO) build -tags faultinject -o $(BIN)/strata-fi ./cmd/strata
	@mkdir -p $(BIN)/nemesis; rm -rf $(BIN)/nemesis/broken; \
	STRATA_FAULT_EPOCH=reuse $(BIN)/strata-fi testnet run testdata/testnet/nemesis-short.yaml --bin $(BIN)/strata-fi \
		--run-dir $(BIN)/nemesis/broken --report $(BIN)/nemesis/broken.md; rc=$$?; \
	if [ $$rc -eq 1 ] && grep -q 'NOT LINEARIZABLE' $(BIN)/nemesis/broken.md; then \
		echo "== nemesis-broken: the checker caught the broken build"; \
	else echo "== nemesis-broken: NOT CAUGHT (exit $$rc)"; exit 1; fi

# The placement planner against the baselines on a bundled scenario.
plan: build
	$(BIN)/strata plan --scenario testdata/scenarios/mixed-consumer.yaml

# The engine's independent reference (ggml through the ollama module, cgo)
# lives in a nested module so that the main module does not depend on it.
OPENAI_CLIENT    := node/api/testdata/openai-client
ANTHROPIC_CLIENT := node/api/testdata/anthropic-client
AI_SDK_CLIENT    := node/api/testdata/ai-sdk-client
HF_ORACLE        := engine/testdata/hf-oracle

# The main module's tests, then three independent runs side by side (each
# one's output printed whole when it ends): the tests the faultinject tag
# adds, the refcheck module's and the ggml modules'. Side by side they take
# about a minute less than one after another.
test: npm-deps debs
	$(GO) test -timeout $(TEST_TIMEOUT) $(PKGS)
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-faultinject test-refcheck test-ggml
# Only the tests the tag adds (found in the tagged test files): the plain
# ones ran above.
test-faultinject:
	@files=$$(git ls-files '*_test.go' | xargs grep -l '^//go:build faultinject'); \
	pkgs=$$(for f in $$files; do echo ./$$(dirname $$f); done | sort -u); \
	tests=$$(grep -ho '^func Test[A-Za-z0-9_]*' $$files | sed 's/^func //' | paste -sd'|'); \
	echo "$(GO) test -tags faultinject -run '^($$tests)$$' $$pkgs"; \
	$(GO) test -tags faultinject -timeout $(TEST_TIMEOUT) -run "^($$tests)$$" $$pkgs
test-refcheck:
	cd engine/internal/refcheck && $(GO) test -timeout $(TEST_TIMEOUT) ./...

# Debian packages the tests use: chromium (the dashboard's browser test,
# driven by chromedp) and iptables (the namespace network's NAT, partitions
# and delay queue). A test whose package cannot be had skips, saying why.
DEBS := chromium iptables
debs:
	@missing=; for p in $(DEBS); do command -v $$p >/dev/null || [ -x /usr/sbin/$$p ] || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ apt-get install -y --no-install-recommends $$missing >/dev/null 2>&1 || \
		  { apt-get update >/dev/null && apt-get install -y --no-install-recommends $$missing >/dev/null; }; } || \
		echo "apt-get install$$missing failed: the tests that need them will skip"; \
	else echo "$$missing not found and not installable here (needs root and apt-get): the tests that need them will skip"; fi

# The official openai and Anthropic npm clients and the Vercel AI SDK, pinned by their lock
# files, for the API's compatibility tests (which skip, saying why, where
# npm is missing).
npm-deps: $(OPENAI_CLIENT)/node_modules/openai/package.json $(ANTHROPIC_CLIENT)/node_modules/@anthropic-ai/sdk/package.json \
	$(AI_SDK_CLIENT)/node_modules/ai/package.json \
	$(HF_ORACLE)/node_modules/.package-lock.json
$(OPENAI_CLIENT)/node_modules/openai/package.json: $(OPENAI_CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then cd $(OPENAI_CLIENT) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; \
	else echo "npm not found: the openai client test will skip"; fi
$(ANTHROPIC_CLIENT)/node_modules/@anthropic-ai/sdk/package.json: $(ANTHROPIC_CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then cd $(ANTHROPIC_CLIENT) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; \
	else echo "npm not found: the Anthropic client test will skip"; fi
# The Vercel AI SDK (ai, @ai-sdk/openai-compatible): an agent framework's
# tool loop against the node (TestAISDKAgent).
$(AI_SDK_CLIENT)/node_modules/ai/package.json: $(AI_SDK_CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then cd $(AI_SDK_CLIENT) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; \
	else echo "npm not found: the AI SDK agent test will skip"; fi

# Hugging Face's tokenizers (transformers.js fork) with real tokenizer.json
# files and @huggingface/jinja: the tokenizer and chat-template oracles.
$(HF_ORACLE)/node_modules/.package-lock.json: $(HF_ORACLE)/package-lock.json
	@if command -v npm >/dev/null; then cd $(HF_ORACLE) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; \
	else echo "npm not found: the Hugging Face tokenizer and template tests will skip"; fi

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install $(STATICCHECK)

lint: $(TOOLS)/staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(TOOLS)/staticcheck $(PKGS)
	@# The cgo modules (ggml's engine and its binary) are modules of their own.
	for m in engine/ggml cmd/strata-ggml; do (cd $$m && $(GO) vet ./... && $(TOOLS)/staticcheck ./...) || exit 1; done

# The leader-liveness harness (issue 35): HANDOVERS clean leader shutdowns
# (plain, right after a promotion a voter has not received, and after the
# promotion of a lagging member) beside a busy loop on every core, each
# followed by a new leader within the election timeout; then the same
# sequences with the fix off, which must leave the swarm leaderless.
HANDOVERS ?= 1000
handovers:
	@burn=; for i in $$(seq $$(nproc)); do (while :; do :; done) & burn="$$burn $$!"; done; \
	trap 'kill $$burn' EXIT; \
	mkdir -p $(BIN); STRATA_HANDOVERS=$(HANDOVERS) $(GO) test -count=1 -timeout 120m -v \
		-run 'TestHandovers|TestStuckElectionWithoutFix' ./consensus >$(BIN)/handovers.txt 2>&1; rc=$$?; \
	grep -E '^(---|ok|FAIL|PASS)|handovers elected|handover_test.go:[0-9]+: (no leader|run [0-9]+ .*(past|no leader))' $(BIN)/handovers.txt \
		| grep -v -- '--- PASS: TestHandovers/'; echo "full log: $(BIN)/handovers.txt"; exit $$rc

# Flaky-test hunt (issue 35): make test's main suite FLAKE_RUNS times, each
# with a fresh shuffle seed, beside a busy loop on every core; every failed
# test is listed with its run's seed (rerun one with go test -shuffle SEED).
# Logs and the summary: bin/flakehunt/.
FLAKE_RUNS ?= 10
flakehunt: npm-deps debs
	@burn=; for i in $$(seq $$(nproc)); do (while :; do :; done) & burn="$$burn $$!"; done; \
	trap 'kill $$burn' EXIT; rm -rf $(BIN)/flakehunt; mkdir -p $(BIN)/flakehunt; fails=0; \
	for i in $$(seq $(FLAKE_RUNS)); do \
		seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); log=$(BIN)/flakehunt/run-$$i.txt; \
		$(GO) test -count=1 -shuffle=$$seed -timeout $(TEST_TIMEOUT) $(PKGS) >$$log 2>&1 && r=ok || { r=FAIL; fails=$$((fails+1)); }; \
		echo "run $$i seed $$seed: $$r $$(grep -E '^--- FAIL' $$log | awk '{print $$3}' | tr '\n' ' ')" | tee -a $(BIN)/flakehunt/summary.txt; \
	done; echo "$$fails of $(FLAKE_RUNS) runs failed" | tee -a $(BIN)/flakehunt/summary.txt; test $$fails -eq 0

# The API under resource exhaustion (issue 35) at full size: 10,000 idle
# connections from 40 addresses, 1,000 slowloris clients, 1,000 concurrent
# streams, each while other clients are served (make test runs them small).
# Figures: bin/exhaust.txt.
exhaust:
	@mkdir -p $(BIN)
	STRATA_EXHAUST=1 $(GO) test -count=1 -v -run 'TestExhaust' ./node/api 2>&1 | tee $(BIN)/exhaust.txt | grep -E '^(---|ok|FAIL|PASS)|exhaust_test.go'

# Benchmarks of the functional core; BENCHTIME trades precision for time.
# ./node/... includes BenchmarkPrefixCacheChat: a 4-turn chat through a
# 3-node swarm, TTFT and prefill positions with the prefix cache and without;
# and BenchmarkUploaderLatency: a node's token time while a peer (a child
# process) fetches the model from it, idle, adaptive, uncapped and capped
# (one alternation at BENCHTIME 1s; -benchtime 40x to bound a 10% effect).
# The engine's speed against llama.cpp is make bench-llamacpp's; refcheck's
# cgo ggml build is a logits oracle only (a generic CPU build, no speed
# baseline), so its BenchmarkDecodeVsGGML is not run here.
BENCHTIME ?= 1s
bench:
	@mkdir -p $(BIN)
	STRATA_FETCH_PROCESS=1 $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./layers/... ./routing/... ./swarm/... ./engine/... ./consensus/... ./node/... | tee $(BIN)/bench.txt

# The ggml engine backend (issue 18): a nested module built with cgo, so
# that the default build stays pure Go. Its first build compiles ggml's CPU
# backend (as the refcheck module does; the build cache shares it).
test-ggml:
	cd engine/ggml && $(GO) test -timeout $(TEST_TIMEOUT) ./...
	cd cmd/strata-ggml && $(GO) test -timeout $(TEST_TIMEOUT) ./...
# bin/strata-ggml: strata with the ggml engine (strata node --engine
# ggml|auto); it needs cgo and a C toolchain. GPU backends come from
# make build-cuda / build-vulkan (--ggml-lib-dir); macOS has Metal built in.
# ollama's cgo build of ggml's CPU backend targets baseline x86-64 (SSE2)
# and leaves out its repacked weight layouts; GGML_CFLAGS build it for this
# CPU (AVX2/AVX-512/VNNI kernels, as llama.cpp's zen4/icelake/haswell
# variants have) with GGML_USE_CPU_REPACK (the interleaved Q4_0/Q4_K/IQ4_NL
# layouts llama.cpp uses on the CPU). The binaries then need this CPU (or
# one with its instruction sets): GGML_CFLAGS=-O3 builds portable ones.
# bin/ggml-bench is the ggml engine's side of bench-ggml-llamacpp; its
# features subcommand prints what the build's kernels are.
GGML_CFLAGS ?= -O3 -march=native -DGGML_USE_CPU_REPACK
GGML_ENV     = CGO_CFLAGS="$(GGML_CFLAGS)" CGO_CXXFLAGS="$(GGML_CFLAGS)"
build-ggml:
	@mkdir -p $(BIN)
	cd engine/ggml && export $(GGML_ENV) && $(GO) build ./... && $(GO) vet ./... && \
		$(GO) build -o $(CURDIR)/$(BIN)/ggml-bench ./cmd/ggml-bench
	cd cmd/strata-ggml && export $(GGML_ENV) && $(GO) vet ./... && $(GO) build -o $(CURDIR)/$(BIN)/strata-ggml .
	@$(BIN)/ggml-bench features
	@test ! -x $(TOOLS)/staticcheck || (cd engine/ggml && export $(GGML_ENV) && $(TOOLS)/staticcheck ./...)
	@test ! -x $(TOOLS)/staticcheck || (cd cmd/strata-ggml && export $(GGML_ENV) && $(TOOLS)/staticcheck ./...)
# Decode and 512-token prefill tok/s of the ggml backend and of the
# pure-Go engine on the same files, at 1 and 2 threads, with the ratio
# go/ggml, ggml built as build-ggml builds it.
GGML_DECODE_STEPS  ?= 32x
GGML_PREFILL_RUNS  ?= 2x
bench-ggml:
	@mkdir -p $(BIN)
	cd engine/ggml && export $(GGML_ENV) && \
		{ $(GO) test -run '^$$' -bench Decode -benchtime $(GGML_DECODE_STEPS) ./... && \
		  $(GO) test -run '^$$' -bench Prefill -benchtime $(GGML_PREFILL_RUNS) ./...; } | tee $(CURDIR)/$(BIN)/bench-ggml.txt

# Strata's engine against llama.cpp's own prebuilt CPU build (npm
# node-llama-cpp 3.22.1 and @node-llama-cpp/linux-x64 3.22.1, pinned by
# the lock file; --ignore-scripts and getLlama({build: "never"}): nothing
# is built from source) on the same generated GGUF files in the same run:
# decode at 1 and 2 threads, a 512-token prefill, 16 sequences decoding
# together, as tok/s of each and the ratio, the median of BENCH_RUNS
# alternating runs, each in its own process; the memory read bandwidth
# beside it. Files are generated into bin/bench-models once; BENCH_SHAPES
# tiny (TinyLlama 1.1B's shape: Q4_K_M, Q8_0, F16) and/or 8b (Llama-3-8B's:
# Q4_K_M, Q8_0, 4.9 and 8.5 GB) and/or qwen3-30b-a3b (Qwen3-30B-A3B's
# mixture of experts, Q4_K_M, decode only, 18.6 GB; each side peaks near
# 21 GB, so GOMEMLIMIT=20GiB on 24 GB; BENCH_FLAGS="-layers 12" makes it
# 12 of its 48 layers where memory is short, see docs/moe.md).
# BENCH_FLAGS="-metrics ctx" measures decode at positions 2,048 and 8,192
# instead (32 tokens after an untimed prompt of that length; -threads 1
# keeps to one thread; minutes a run: not in the default set).
# Report: bin/bench-llamacpp.txt. Not part
# of make test. (The lock file was written by npm 11.13, which records the
# platform packages node-llama-cpp lists but never published as inert
# entries; later npm versions omit them and then refuse their own lock.
# --omit=optional leaves out the CUDA and Vulkan builds, which a CPU
# comparison does not load.)
LLAMACPP_BENCH := engine/testdata/llamacpp-bench
BENCH_SHAPES   ?= tiny,8b
BENCH_RUNS     ?= 3
BENCH_FLAGS    ?=
bench-llamacpp: build $(LLAMACPP_BENCH)/node_modules/.package-lock.json
	$(GO) build -o $(BIN)/llamabench ./engine/internal/llamabench
	$(BIN)/llamabench drive -shapes $(BENCH_SHAPES) -runs $(BENCH_RUNS) -models $(BIN)/bench-models \
		-strata $(BIN)/strata -script $(LLAMACPP_BENCH)/bench.mjs -out $(BIN)/bench-llamacpp.txt $(BENCH_FLAGS)
# The ggml engine (built as build-ggml builds it) against llama.cpp's
# prebuilt CPU build in the same run, as bench-llamacpp measures them: a
# TinyLlama-shaped Q4_K_M file, decode and a 512-token prefill at 2
# threads, the median of BENCH_RUNS alternating runs, with others' load.
# BENCH_FLAGS=-go adds the pure-Go engine. Report: bin/bench-ggml-llamacpp.txt.
# GGML_FLAVOR=release measures bin/ggml-bench-release (build-ggml-release)
# instead, GGML_FLAVOR=both the two builds in the same run, alternated with
# llama.cpp (so that they see the same load); report
# bin/bench-ggml-llamacpp-$(GGML_FLAVOR).txt.
GGML_FLAVOR   ?=
ggml-sfx       = $(if $(GGML_FLAVOR),-$(GGML_FLAVOR))
ggml-flavors   = $(if $(filter both,$(GGML_FLAVOR)),default release,$(or $(GGML_FLAVOR),default))
ggml-flav-sfx  = $(if $(filter-out default,$1),-$1)
ggml-comma    := ,
ggml-empty    :=
ggml-benches   = $(subst $(ggml-empty) $(ggml-empty),$(ggml-comma),$(foreach f,$(ggml-flavors),$(BIN)/ggml-bench$(call ggml-flav-sfx,$f)))
bench-ggml-llamacpp: build $(foreach f,$(ggml-flavors),build-ggml$(call ggml-flav-sfx,$f)) $(LLAMACPP_BENCH)/node_modules/.package-lock.json
	$(GO) build -o $(BIN)/llamabench ./engine/internal/llamabench
	$(BIN)/llamabench drive -shapes tiny -dtypes q4_k_m -metrics decode,prefill -threads 2 -runs $(BENCH_RUNS) \
		-go=false -ggml $(ggml-benches) -models $(BIN)/bench-models -strata $(BIN)/strata \
		-script $(LLAMACPP_BENCH)/bench.mjs -out $(BIN)/bench-ggml-llamacpp$(ggml-sfx).txt $(BENCH_FLAGS)
$(LLAMACPP_BENCH)/node_modules/.package-lock.json: $(LLAMACPP_BENCH)/package-lock.json
	@command -v npm >/dev/null || { echo "bench-llamacpp needs node (20 or later) and npm"; exit 1; }
	cd $(LLAMACPP_BENCH) && npm ci --omit=optional --no-audit --no-fund --ignore-scripts --loglevel=error

# The ggml engine linked against llama.cpp's own release build of ggml
# (issue 31) instead of compiling the ollama module's copy: the prebuilt
# shared libraries of @node-llama-cpp/linux-x64, pinned by
# $(LLAMACPP_BENCH)'s lock file. -tags ggmlrelease links libggml-base and
# libggml (the backend registry) with an rpath to their directory; at run
# time the binary loads the best CPU variant beside them (zen4, icelake,
# haswell... by ggml's score), as llama.cpp does. Nothing is compiled from
# C sources but engine/ggml's own cgo glue. bin/ggml-bench-release; see
# docs/ggml.md "Linking llama.cpp's release". GGML_RELEASE_DIR may name
# another release's bins directory (the CUDA or Vulkan package's).
GGML_RELEASE_DIR ?= $(LLAMACPP_BENCH)/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
GGML_RELEASE_RPATH = $(abspath $(GGML_RELEASE_DIR))
GGML_RELEASE_ENV  = CGO_LDFLAGS="-L$(abspath $(GGML_RELEASE_DIR)) -Wl,-rpath,$(GGML_RELEASE_RPATH) -l:$$reg -l:libggml-base.so"
ggml-release-reg  = reg=$$(cd $(GGML_RELEASE_DIR) && ls libggml.*.so libggml.so 2>/dev/null | head -1); \
	test -n "$$reg" || { echo "no libggml.*.so (the backend registry) in $(GGML_RELEASE_DIR)"; exit 1; }
build-ggml-release: $(LLAMACPP_BENCH)/node_modules/.package-lock.json
	@mkdir -p $(BIN)
	@$(ggml-release-reg); set -x; cd engine/ggml && export $(GGML_RELEASE_ENV) && \
		$(GO) build -tags ggmlrelease ./... && $(GO) vet -tags ggmlrelease ./... && \
		$(GO) build -tags ggmlrelease -o $(CURDIR)/$(BIN)/ggml-bench-release ./cmd/ggml-bench
	@$(BIN)/ggml-bench-release features
	@test ! -x $(TOOLS)/staticcheck || { $(ggml-release-reg); cd engine/ggml && export $(GGML_RELEASE_ENV) && $(TOOLS)/staticcheck -tags ggmlrelease ./...; }
# engine/ggml's tests on the release build (TEST_GGML=-run 'Name' picks).
TEST_GGML ?=
test-ggml-release: $(LLAMACPP_BENCH)/node_modules/.package-lock.json
	@$(ggml-release-reg); cd engine/ggml && export $(GGML_RELEASE_ENV) && \
		$(GO) test -tags ggmlrelease -timeout $(TEST_TIMEOUT) -count=1 $(TEST_GGML) .

# ggml's GPU backends are shared libraries that ggml loads at run time,
# built with CMake from the sources inside the pinned ollama module, for
# one architecture by default (a full CUDA build takes about an hour on 2
# cores); engine/ggml loads them with WithLibDir. build-cuda is untested here:
# this machine has no nvcc and no GPU (build-vulkan runs here on lavapipe).
CUDA_ARCH ?= native
GPU_BUILD := $(CURDIR)/$(BIN)/ggml-gpu
ollama-src = $$(cd engine/ggml && $(GO) mod download -json github.com/ollama/ollama | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
build-cuda:
	@command -v cmake >/dev/null && command -v nvcc >/dev/null || { echo "build-cuda needs cmake and nvcc (the CUDA toolkit)"; exit 1; }
	cmake -S $(ollama-src) -B $(GPU_BUILD)/cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCH)
	cmake --build $(GPU_BUILD)/cuda --target ggml-cuda -j $$(nproc)
# build-vulkan (docs/ggml.md "Vulkan on lavapipe"): ggml-vulkan from the
# same pinned sources. Debian 12's Vulkan-Hpp (1.3.239) is too old for
# ggml-vulkan.cpp, so the headers come from Debian 13's libvulkan-dev
# (pinned URL and sha256), unpacked under bin/ and never installed; the
# library links the system's libvulkan1 loader. ollama's vendored ggml lacks
# vulkan-shaders/feature-tests/, so glslc goes through
# engine/ggml/vulkan/glslc, which supplies those tests (else every shader
# extension is taken as supported and Debian's glslc fails on them).
# Debian packages: cmake, glslc, libvulkan1 and mesa-vulkan-drivers
# (lavapipe, the CPU Vulkan device test-vulkan runs on): debs-vulkan.
VULKAN_DEV_DEB    := libvulkan-dev_1.4.309.0-1_amd64.deb
VULKAN_DEV_URL    := http://deb.debian.org/debian/pool/main/v/vulkan-loader/$(VULKAN_DEV_DEB)
VULKAN_DEV_SHA256 := 8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a
VULKAN_SDK_DIR    := $(CURDIR)/$(BIN)/vulkan-headers
VULKAN_LOADER     ?= $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/libvulkan.so.1 /usr/lib/libvulkan.so.1 /usr/lib64/libvulkan.so.1))
VULKAN_LIB_DIR    := $(GPU_BUILD)/vulkan/lib/ollama
DEBS_VULKAN       := cmake glslc libvulkan1 mesa-vulkan-drivers
debs-vulkan:
	@$(MAKE) --no-print-directory debs-need DEBS_NEED="$(DEBS_VULKAN)"
# debs-need DEBS_NEED="p ...": apt-installs those Debian packages that are
# missing, or fails saying why it cannot.
debs-need:
	@missing=; for p in $(DEBS_NEED); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ apt-get install -y --no-install-recommends $$missing >/dev/null 2>&1 || \
		  { apt-get update >/dev/null && apt-get install -y --no-install-recommends $$missing >/dev/null; }; } || \
		{ echo "apt-get install$$missing failed"; exit 1; }; \
	else echo "$$missing not installed and not installable here (needs root and apt-get)"; exit 1; fi
$(VULKAN_SDK_DIR)/usr/include/vulkan/vulkan.hpp:
	@command -v curl >/dev/null && command -v dpkg-deb >/dev/null || { echo "build-vulkan needs curl and dpkg-deb for the Vulkan headers"; exit 1; }
	@mkdir -p $(VULKAN_SDK_DIR)
	curl -sSfL -o $(VULKAN_SDK_DIR)/$(VULKAN_DEV_DEB) $(VULKAN_DEV_URL)
	echo "$(VULKAN_DEV_SHA256)  $(VULKAN_SDK_DIR)/$(VULKAN_DEV_DEB)" | sha256sum -c --quiet || { rm -f $(VULKAN_SDK_DIR)/$(VULKAN_DEV_DEB); exit 1; }
	dpkg-deb -x $(VULKAN_SDK_DIR)/$(VULKAN_DEV_DEB) $(VULKAN_SDK_DIR)
	@touch $@
build-vulkan: debs-vulkan $(VULKAN_SDK_DIR)/usr/include/vulkan/vulkan.hpp
	@test -n "$(VULKAN_LOADER)" || { echo "build-vulkan: no libvulkan.so.1 (Debian's libvulkan1)"; exit 1; }
	nice -n 19 cmake -S $(ollama-src) -B $(GPU_BUILD)/vulkan -DCMAKE_BUILD_TYPE=Release \
		-DVulkan_INCLUDE_DIR=$(VULKAN_SDK_DIR)/usr/include -DVulkan_LIBRARY=$(VULKAN_LOADER) \
		-DVulkan_GLSLC_EXECUTABLE=$(CURDIR)/engine/ggml/vulkan/glslc
	nice -n 19 cmake --build $(GPU_BUILD)/vulkan --target ggml-vulkan -j $$(nproc)
	@ls -l $(VULKAN_LIB_DIR)/libggml-vulkan.so $(VULKAN_LIB_DIR)/libggml-base.so
# test-vulkan: engine/ggml's Vulkan tests (vulkan_test.go, TestVulkanMixedSwarm)
# and strata-ggml's TestStart on the first Vulkan device, Mesa's lavapipe
# here (a CPU-type device, which ggml-vulkan uses only when
# GGML_VK_VISIBLE_DEVICES selects it), twice: with ggml-vulkan's F32
# kernels only (GGML_VK_DISABLE_F16: the CPU device's 1e-4 bound) and as a
# GPU runs it (F16 staging in matrix-matrix kernels: the F16 bound).
# ggml-vulkan's debug lines (every memory query) are filtered out. Not
# part of make test: see docs/ggml.md "Vulkan on lavapipe" for its cost.
VULKAN_DEVICE   ?= 0
VULKAN_TEST_ENV  = GGML_VK_VISIBLE_DEVICES=$(VULKAN_DEVICE) STRATA_VULKAN_LIB_DIR=$(VULKAN_LIB_DIR)
# Where the Debian packages cannot be had (no root, no apt-get) it skips,
# saying why; a build or test failure fails it.
test-vulkan: SHELL := /bin/bash
test-vulkan:
	@$(MAKE) --no-print-directory debs-vulkan || { echo "== test-vulkan: SKIPPED (the packages above are missing)"; exit 0; }; \
		$(MAKE) --no-print-directory build-vulkan && $(MAKE) --no-print-directory test-vulkan-run
test-vulkan-run: SHELL := /bin/bash
test-vulkan-run:
	set -o pipefail; cd engine/ggml && \
	for f16 in off on; do \
		echo "== Vulkan tests, F16 kernels $$f16"; \
		env -u GGML_VK_DISABLE_F16 $(VULKAN_TEST_ENV) $$([ $$f16 = off ] && echo GGML_VK_DISABLE_F16=1) \
			$(GO) test -timeout $(TEST_TIMEOUT) -count=1 -v -run 'Vulkan' . 2>&1 | grep -v 'get_device_memory called' || exit 1; \
	done
	set -o pipefail; cd cmd/strata-ggml && env $(VULKAN_TEST_ENV) \
		$(GO) test -timeout $(TEST_TIMEOUT) -count=1 -v -run 'TestStart' . 2>&1 | grep -v 'get_device_memory called'

# test-vulkan-release: the same engine/ggml Vulkan tests on llama.cpp's
# release of ggml (-tags ggmlrelease): ggml-base, the backend registry and
# ggml-vulkan as node-llama-cpp's linux-x64-vulkan package ships them, at
# the version and integrity the bench's lock pins (npm pack, checked; no
# build). build-vulkan's ggml-vulkan, compiled from ollama's sources, goes
# wrong on lavapipe where this one does not (docs/ggml.md "Vulkan on
# lavapipe"). Needs lavapipe (debs-vulkan), node, npm and openssl.
VULKAN_RELEASE     := $(BIN)/vulkan-release
VULKAN_RELEASE_DIR := $(VULKAN_RELEASE)/package/bins/linux-x64-vulkan
vulkan-release-pkg  = node -p "require('$(CURDIR)/$(LLAMACPP_BENCH)/package-lock.json').packages['node_modules/@node-llama-cpp/linux-x64-vulkan'].$1"
$(VULKAN_RELEASE_DIR)/libggml-vulkan.so: $(LLAMACPP_BENCH)/package-lock.json
	@rm -rf $(VULKAN_RELEASE) && mkdir -p $(VULKAN_RELEASE)
	cd $(VULKAN_RELEASE) && ver=$$($(call vulkan-release-pkg,version)) && want=$$($(call vulkan-release-pkg,integrity)) && \
		tgz=$$(npm pack --silent @node-llama-cpp/linux-x64-vulkan@$$ver) && \
		got=sha512-$$(openssl dgst -sha512 -binary $$tgz | base64 -w0) && \
		{ [ "$$got" = "$$want" ] || { echo "$$tgz: integrity $$got, the lock has $$want"; exit 1; }; } && tar xzf $$tgz
	@touch $@
test-vulkan-release: SHELL := /bin/bash
test-vulkan-release:
	@$(MAKE) --no-print-directory debs-vulkan || { echo "== test-vulkan-release: SKIPPED (the packages above are missing)"; exit 0; }; \
		$(MAKE) --no-print-directory $(VULKAN_RELEASE_DIR)/libggml-vulkan.so && $(MAKE) --no-print-directory test-vulkan-release-run
test-vulkan-release-run: SHELL := /bin/bash
test-vulkan-release-run: GGML_RELEASE_DIR := $(VULKAN_RELEASE_DIR)
test-vulkan-release-run:
	@$(ggml-release-reg); set -o pipefail; cd engine/ggml && export $(GGML_RELEASE_ENV) && \
	for f16 in off on; do \
		echo "== Vulkan tests on llama.cpp's release, F16 kernels $$f16"; \
		env -u GGML_VK_DISABLE_F16 GGML_VK_VISIBLE_DEVICES=$(VULKAN_DEVICE) STRATA_VULKAN_LIB_DIR=$(abspath $(VULKAN_RELEASE_DIR)) \
			$$([ $$f16 = off ] && echo GGML_VK_DISABLE_F16=1) \
			$(GO) test -tags ggmlrelease -timeout $(TEST_TIMEOUT) -count=1 -v -run 'Vulkan' . 2>&1 | grep -v 'get_device_memory called' || exit 1; \
	done

# The GPU check (issue 31; testnet/gpu-check.sh, docs/ggml.md "GPU node").
# gpu-bundle writes bin/gpu-bundle.tar.gz, all that a Linux host with an
# NVIDIA GPU, nvcc and CMake but no Go and no network needs: strata-ggml,
# ggml-bench and ggml-check linked against llama.cpp's release of ggml
# (-tags ggmlrelease, stripped) with its prebuilt libraries in lib/ (ggml-
# base, the backend registry, the CPU variants; an rpath of $ORIGIN/../lib),
# that release's ggml sources (node-llama-cpp's gitRelease.bundle, the
# commit those libraries were built from) for the CUDA backend's CMake
# build, and the scripts. It fails over 64 MiB. gpu-check-dry rehearses
# the check here on the CPU device (every step but the CUDA build); report
# in bin/gpu-check/.
GPU_BUNDLE    := $(BIN)/gpu-bundle
NLC_LLAMA     := $(LLAMACPP_BENCH)/node_modules/node-llama-cpp/llama
gpu-bundle: GGML_RELEASE_RPATH = \$$ORIGIN/../lib
gpu-bundle: $(LLAMACPP_BENCH)/node_modules/.package-lock.json
	@rm -rf $(GPU_BUNDLE) $(GPU_BUNDLE)-git && mkdir -p $(GPU_BUNDLE)/bin $(GPU_BUNDLE)/lib $(GPU_BUNDLE)/ggml-src
	@$(ggml-release-reg); set -x; cd engine/ggml && export $(GGML_RELEASE_ENV) && \
		for c in ggml-bench ggml-check; do \
			$(GO) build -tags ggmlrelease -trimpath -ldflags="-s -w" -o $(CURDIR)/$(GPU_BUNDLE)/bin/$$c ./cmd/$$c || exit 1; \
		done && cd $(CURDIR)/cmd/strata-ggml && \
		$(GO) build -tags ggmlrelease -trimpath -ldflags="-s -w" -o $(CURDIR)/$(GPU_BUNDLE)/bin/strata-ggml .
	@$(ggml-release-reg); cd $(GGML_RELEASE_DIR) && cp libggml-base.so $$reg libggml-cpu-*.so $(CURDIR)/$(GPU_BUNDLE)/lib/
	git clone -q --no-checkout $(NLC_LLAMA)/gitRelease.bundle $(GPU_BUNDLE)-git
	git -C $(GPU_BUNDLE)-git archive HEAD ggml LICENSE | tar -x -C $(GPU_BUNDLE)/ggml-src
	@rm -rf $(GPU_BUNDLE)-git
	cp testnet/gpu-check.sh testnet/up.sh testnet/down.sh $(GPU_BUNDLE)/
	tar -C $(BIN) -czf $(BIN)/gpu-bundle.tar.gz gpu-bundle
	@size=$$(stat -c %s $(BIN)/gpu-bundle.tar.gz); \
		echo "$(BIN)/gpu-bundle.tar.gz: $$size bytes ($$((size >> 20)) MiB of the 64 MiB allowed)"; test $$size -le $$((64 << 20))
gpu-check-dry: gpu-bundle
	OUT=$(BIN)/gpu-check bash $(GPU_BUNDLE)/gpu-check.sh --dry-run
# gpu-check-build rehearses the check's other half here, without a GPU:
# gpu-check.sh --build-only from the bundle builds ggml-cuda from the
# release's sources for GPU_CHECK_ARCH (Hopper's sm_90 by default: with
# no GPU, nothing to detect), compiles its bandwidth program, checks with
# ldd -r that every symbol resolves against the release's libggml-base.so
# and that the bundle's ggml-bench loads the library. nvcc 12.4 and
# CUDA's libraries come from Debian 13's non-free packages
# (testnet/cuda-toolkit.sh, pinned and checked, unpacked under
# bin/cuda-toolkit, never installed; 1.3 GB fetched). Needs root and
# apt-get for cmake, or cmake already there. Not part of make test: the
# build alone took 29.5 min here (docs/ggml.md "GPU node").
GPU_CHECK_ARCH ?= 90
CUDA_TOOLKIT   := $(CURDIR)/$(BIN)/cuda-toolkit/cuda
gpu-check-build: gpu-bundle
	@$(MAKE) --no-print-directory debs-need DEBS_NEED=cmake
	bash testnet/cuda-toolkit.sh $(BIN)/cuda-toolkit
	PATH=$(CUDA_TOOLKIT)/bin:$$PATH LD_LIBRARY_PATH=$(CUDA_TOOLKIT)/lib64:$(CUDA_TOOLKIT)/driver CUDA_ARCH=$(GPU_CHECK_ARCH) \
		OUT=$(BIN)/gpu-check-build bash $(GPU_BUNDLE)/gpu-check.sh --build-only

# Short fuzzing of every decoder and planner input; FUZZTIME per target.
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for fn in $$($(GO) test -list 'Fuzz.*' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$fn"; \
			$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# Every fuzz target for FUZZ_EXECS executions (10^6: issue 35's budget),
# one at a time; a table of targets, executions and verdicts at the end
# (bin/fuzz/summary.txt, logs beside it). A failing input stays in its
# package's testdata/fuzz/ for the fix, as Go writes it.
FUZZ_EXECS ?= 1000000
fuzz-long:
	@mkdir -p $(BIN)/fuzz; : >$(BIN)/fuzz/summary.txt; fail=0; \
	for pkg in $$($(GO) list ./...); do \
		for fn in $$($(GO) test -list 'Fuzz.*' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			log=$(BIN)/fuzz/$$(basename $$pkg)-$$fn.log; start=$$(date +%s); \
			$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZ_EXECS)x $$pkg >$$log 2>&1; rc=$$?; \
			if [ $$rc -eq 0 ]; then verdict="ok, $(FUZZ_EXECS) execs"; else verdict="FAILED (see $$log)"; fail=1; fi; \
			line="$$pkg $$fn: $$verdict in $$(( $$(date +%s) - start )) s"; echo "$$line"; echo "$$line" >>$(BIN)/fuzz/summary.txt; \
		done; \
	done; exit $$fail

clean:
	rm -rf $(BIN)
