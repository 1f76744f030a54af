#!/usr/bin/env bash
# Install, then run the tests: the fast tier (a few minutes), or with --all every
# test, the slow ones too (multi-process trainings, torchrun agents, restarts,
# faults, shaped links, benchmark quick modes, elastic training on torchft and
# Hugging Face models, the optional extras it installs). Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--all" ]; then
    shift
    bash scripts/install.sh test,plot,torchft,hf
    exec .venv/bin/python -m pytest -q "$@"
fi
bash scripts/install.sh test,plot
exec .venv/bin/python -m pytest -q -m "not slow" "$@"
