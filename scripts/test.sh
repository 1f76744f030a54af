#!/usr/bin/env bash
# Install, then run the tests: the fast tier (a few minutes), or with --all every
# test, the slow ones too (multi-process trainings, torchrun agents, restarts,
# faults, shaped links, benchmark quick modes, and elastic training on torchft,
# the optional extra it installs). Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--all" ]; then
    shift
    bash scripts/install.sh test,plot,torchft
    exec .venv/bin/python -m pytest -q "$@"
fi
bash scripts/install.sh test,plot
exec .venv/bin/python -m pytest -q -m "not slow" "$@"
