.DEFAULT_GOAL := all

.PHONY: install format lint mypy test test-fast test-lowest demo bench all

install:
	scripts/bootstrap

format: install
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

lint: install
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

mypy: install
	.venv/bin/mypy

# The whole suite: unit tests and every real engine (what the README and .ci/run run).
test:
	scripts/test

# The unit tests only (tests/, no server), without the slow ones: well under 15 s.
test-fast:
	scripts/test -q tests -m "not slow"

# The lowest dependency versions pyproject.toml allows, in .venv-lowest (also in .ci/run).
test-lowest:
	scripts/test-lowest

demo:
	scripts/demo

bench: install
	.venv/bin/python benchmarks/bench_core.py

all: lint mypy test
