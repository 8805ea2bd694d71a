# Thin aliases for the scripts the README and CI call.
.PHONY: install demo test lint bench

install:
	bash scripts/install.sh

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

lint: install
	.venv/bin/ruff check agent cards loop tools server evals bench tests prompts watch store
	.venv/bin/ruff format --check agent cards tools server evals bench tests prompts store

# Each benchmark ends with one line `PASS|FAIL <metric> <value> (target ...)`; bench/all.py runs
# them and writes docs/figures.md (commit, machine, load, date).
bench: install
	bash scripts/system-deps.sh
	.venv/bin/python bench/all.py
