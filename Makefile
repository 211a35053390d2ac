# `make demo` and `make test` work on a fresh machine with only python3: each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
# torch is an optional extra for users; the suite installs its CPU build because the loss scaler,
# the optimizers, the torch gradient recorder and the fp8 recipes (torchao) are tested against them
# (`make test TORCH=` skips those tests)
TORCH ?= torch==2.13.0 torchao==0.18.0

# the suite spread over the cores by pytest-xdist, one test at a time to whichever worker is free
# (the long ones first: tests/conftest.py); `make test PYTEST_ARGS=` runs it in one process
PYTEST_ARGS ?= -n logical --dist load --maxschedchunk 1
# beside another worker, BLAS runs on one thread and OpenMP's idle threads sleep instead of
# spinning: else the workers' threads take turns on the cores (measured on two cores: a lesson
# ran 4x slower, and the suite took as long as in one process)
TEST_ENV ?= OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive

.PHONY: demo test lint typecheck bench docs docs-check clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,lessons,docs,scale]' $(TORCH)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m floatlab demo
	$(BIN)/python -m floatlab compare fp32 fp16 mixed-fp16 --data underflow --epochs 3 --plot demo-curves.png

lint: $(STAMP)
	$(BIN)/ruff check floatlab tests benchmarks docs/conf.py docs/_ext
	$(BIN)/ruff format --check floatlab tests benchmarks docs/conf.py docs/_ext

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) lint typecheck docs-check
	$(TEST_ENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_codec.py
	$(BIN)/python benchmarks/bench_rounding.py
	$(BIN)/python benchmarks/bench_histogram.py
	$(BIN)/python benchmarks/bench_simulate.py
	$(BIN)/python benchmarks/bench_blocks.py
	$(BIN)/python benchmarks/bench_accumulate.py
	$(BIN)/python benchmarks/bench_trainer.py

# the site, into docs/_build/html: lessons and pages executed (cached in docs/_build/.jupyter_cache)
docs: $(STAMP)
	$(BIN)/sphinx-build -j auto -b html -n -W --keep-going docs docs/_build/html -d docs/_build/doctrees

# the same build from scratch with warnings as errors and every reference checked, executing no
# notebook (the tests run the lessons and the pages' code cells): a broken reference or page fails
# `make test`
docs-check: $(STAMP)
	FLOATLAB_DOCS_EXECUTE=off $(BIN)/sphinx-build -E -q -j auto -b html -n -W --keep-going \
		docs docs/_build/check -d docs/_build/check-doctrees

.PHONY: test-exhaustive fuzz

# every one of the 2^32 float32 inputs into fp16 and bf16, all modes, against independent oracles
# (15 to 20 minutes on two cores); writes benchmarks/results/exhaustive.md, fails on a mismatch
test-exhaustive: $(STAMP)
	$(BIN)/python benchmarks/exhaustive.py

# 100,000 generated command lines through the CLI; writes benchmarks/results/fuzz.md, fails on a crash
fuzz: $(STAMP)
	NUMBA_NUM_THREADS=2 $(BIN)/python benchmarks/fuzz_cli.py -n 100000

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache .mypy_cache .ruff_cache
