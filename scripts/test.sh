#!/usr/bin/env bash
# Install, then run the tests: the fast tier (a few minutes), or with --all every
# test, the slow ones too (multi-process trainings, torchrun agents, restarts,
# faults, shaped links, benchmark quick modes). Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test,plot
if [ "${1:-}" = "--all" ]; then
    shift
    exec .venv/bin/python -m pytest -q "$@"
fi
exec .venv/bin/python -m pytest -q -m "not slow" "$@"
