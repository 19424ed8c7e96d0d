.DEFAULT_GOAL := all

.PHONY: install format lint mypy test demo bench all

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

test:
	scripts/test

demo:
	scripts/demo

bench: install
	.venv/bin/python benchmarks/bench_core.py

all: lint mypy test
