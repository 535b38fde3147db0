# The two set-up commands: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[collect,test]'
	touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[collect,test,bench]'
	$(BIN)/python bench/bench_anova.py
	$(BIN)/python bench/bench_reml.py
	$(BIN)/python bench/bench_glmm.py
	$(BIN)/python bench/bench_reml_bootstrap.py
	$(BIN)/python bench/bench_large.py
	$(BIN)/python bench/bench_cli.py
	$(BIN)/python bench/bench_dstudy.py
	$(BIN)/python bench/bench_collector.py
	$(BIN)/python bench/fuzz_boundary.py
	$(BIN)/python bench/bench_compare.py
	$(BIN)/python bench/bench_mvt.py
	$(BIN)/python bench/bench_pairwise.py
	$(BIN)/python bench/study_compare.py --reps 400
	$(BIN)/python bench/study_adaptive.py --runs 200 --yardstick-systems 16,32

clean:
	rm -rf $(VENV) demo-output .pytest_cache
