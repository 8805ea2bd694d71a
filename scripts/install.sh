#!/usr/bin/env bash
# Create .venv and install the pinned dependencies (requirements.lock) plus Pivot itself.
# Idempotent: a second run with unchanged pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
stamp=.venv/.pivot-installed
if [ -f "$stamp" ] && [ "$stamp" -nt requirements.lock ] && [ "$stamp" -nt pyproject.toml ]; then
  exit 0
fi
"$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements.lock
.venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
touch "$stamp"
