#!/usr/bin/env bash
# The whole test suite, from a fresh clone: Python deps, the Debian packages the tests use for
# real (OpenSSH sshd, Chromium), lint, then pytest. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
# a test that needs sshd, Chromium, PostgreSQL, tmux or Alertmanager fails instead of skipping (tests/strict_skips.py)
export CI="${CI:-1}"
bash scripts/install.sh
bash scripts/system-deps.sh
.venv/bin/ruff check agent cards loop tools server evals bench tests prompts watch store
exec .venv/bin/python -m pytest tests "$@"
