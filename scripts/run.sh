#!/usr/bin/env bash
# The main job: install, then train on Fashion-MNIST with LSGD, EASGD, local SGD
# and all-reduce (4 simulated workers each) and print the comparison table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python examples/quickstart.py "$@"
