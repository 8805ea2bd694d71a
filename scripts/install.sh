#!/usr/bin/env bash
# Create .venv and install the pinned dependencies (requirements.lock) plus Pivot itself.
# Idempotent: a second run with unchanged pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
stamp=.venv/.pivot-installed
# Pivot's own modules compiled ahead: a shell with PYTHONDONTWRITEBYTECODE set (many images
# set it) would otherwise recompile ~100 modules from source on every `pivot investigate`
# (0.15-0.2 s of a 2 s answer). Stale files are ignored by Python, never wrong.
compile_own() { .venv/bin/python -m compileall -q -j 0 agent tools cards loop server evals watch store >/dev/null || true; }
if [ -f "$stamp" ] && [ "$stamp" -nt requirements.lock ] && [ "$stamp" -nt pyproject.toml ]; then
  compile_own
  exit 0
fi
"$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements.lock
.venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
compile_own
touch "$stamp"
