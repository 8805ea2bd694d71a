#!/usr/bin/env bash
# The whole test suite, from a fresh clone: Python deps, the Debian packages the tests use for
# real (OpenSSH sshd, Chromium), lint, then pytest. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/system-deps.sh
.venv/bin/ruff check agent loop tools server evals bench tests prompts
exec .venv/bin/python -m pytest tests "$@"
