#!/usr/bin/env bash
# The main job: install, then train CNN7 on Fashion-MNIST with LSGD and 4 worker
# processes for about two minutes, and print the result and where the plots are.
# Extra arguments go to `lsgd train` (see `lsgd train --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/lsgd train --minutes 1 --eval-every 30s \
    --out "runs/main-$(date +%Y%m%d-%H%M%S)" "$@"
