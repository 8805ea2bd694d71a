# The README's two commands call `make demo` and `make test`; CI calls `make test` via .ci/run.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-dev system-deps demo test lint bench

$(BIN)/pivot: pyproject.toml requirements.lock
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $(BIN)/pivot

install: $(BIN)/pivot

system-deps:
	bash scripts/system-deps.sh

demo: install
	$(BIN)/pivot investigate --replay evals/incidents/seed-sglang-fewchan-kv-oom.yaml

test: install system-deps
	$(BIN)/ruff check agent tools server evals bench tests
	$(BIN)/python -m pytest tests

lint: install
	$(BIN)/ruff check agent tools server evals bench tests
	$(BIN)/ruff format --check agent tools server evals bench tests

bench: install system-deps
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done
