# `make demo` and `make test` work on a fresh machine with only python3: each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
# torch is an optional extra for users; the suite installs its CPU build because the loss scaler,
# the optimizers and the torch gradient recorder are tested against it (`make test TORCH=` skips them)
TORCH ?= torch==2.13.0

.PHONY: demo test lint typecheck bench docs clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,lessons,docs]' $(TORCH)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m floatlab demo
	$(BIN)/python -m floatlab compare fp32 fp16 mixed-fp16 --data underflow --epochs 3 --plot demo-curves.png

lint: $(STAMP)
	$(BIN)/ruff check floatlab tests benchmarks
	$(BIN)/ruff format --check floatlab tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_codec.py
	$(BIN)/python benchmarks/bench_rounding.py
	$(BIN)/python benchmarks/bench_histogram.py
	$(BIN)/python benchmarks/bench_simulate.py
	$(BIN)/python benchmarks/bench_trainer.py

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache .mypy_cache .ruff_cache
