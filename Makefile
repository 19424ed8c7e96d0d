.DEFAULT_GOAL := all

.PHONY: install format lint mypy test test-fast test-lowest demo bench docs all

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

# The documentation site in site/ (the docs extra, in dev), after checking that the generated
# parts of docs/ (CLI reference, lua/ and module tables) are what the code gives now.
docs: install
	scripts/gen_docs --check
	scripts/gen_facades --check
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

# The published report, docs/benchmarks/ (JSON, Markdown, PNG charts): Redis 7 (redis-server
# on PATH) and a 3-master Cluster of it; this library against raw RPUSH, the spec's design and
# other libraries from the bench extra. About 8 minutes; BENCH_ARGS=--quick is a smoke run.
bench: install
	@stamp=".venv/.bench-$$(cksum pyproject.toml | cut -d' ' -f1)"; \
	if [ ! -f "$$stamp" ]; then \
	  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]' \
	  && rm -f .venv/.bench-* && touch "$$stamp"; \
	fi
	.venv/bin/python -m benchmarks.report $(BENCH_ARGS)

all: lint mypy test
