#!/usr/bin/env bash
# The main job: install, then train LSGD and all-reduce side by side, CNN7 on
# Fashion-MNIST, 4 workers as 4 nodes behind 20 Mbit/s links (shaped by the kernel
# where this machine allows it, root and iproute2; modeled on the simulator's clock
# otherwise, and said so), testing the center every 10 s of training; it ends with a table
# of both methods and runs/main-DATE/comparison.png (test error against time).
# Extra arguments go to `lsgd train` and win (see `lsgd train --help`), e.g.
# --minutes 2, --method lsgd,local-sgd,allreduce, or --method lsgd for one run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh plot
exec .venv/bin/lsgd train --method lsgd,allreduce --workers 4 --groups 4 --link 20mbit \
    --backend auto --minutes 0.75 --eval-every 10s --no-eval-leader \
    --out "runs/main-$(date +%Y%m%d-%H%M%S)" "$@"
