#!/usr/bin/env bash
# Install, then run the tests: the fast tier (a few minutes), or with --all every
# test, the slow ones too (multi-process trainings, torchrun agents, restarts,
# faults, shaped links, benchmark quick modes, elastic training on torchft and
# Hugging Face models, Accelerate and Lightning, the optional extras it installs). With --all the tests run
# in 4 pytest workers of one thread each (most slow tests wait on timeouts, links
# and restarts, not on the cores), then those marked `alone` (that compare wall
# times) one at a time. The fast tier runs in 2 pytest workers. Other arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--all" ]; then
    shift
    bash scripts/install.sh test,plot,torchft,hf,accelerate,lightning
    rc=0
    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -n 4 --dist worksteal -m "not alone" "$@" \
        || rc=$?
    .venv/bin/python -m pytest -q -m alone "$@" || rc=$((rc ? rc : $?))
    exit "$rc"
fi
bash scripts/install.sh test,plot
exec .venv/bin/python -m pytest -q -n 2 -m "not slow" "$@"
