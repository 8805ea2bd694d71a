#!/usr/bin/env bash
# The main job on embedded defaults: investigate a replayed incident card with the offline
# rulebook brain; memory and checkpoints go to SQLite under ~/.pivot.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/pivot investigate --replay evals/incidents/seed-sglang-fewchan-kv-oom.yaml "$@"
