#!/usr/bin/env bash
# Idempotent set-up for a new machine: a virtual environment in .venv with a
# pinned CPU build of torch and lsgd (editable, with its test and plot extras),
# and the Fashion-MNIST Debian package. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${LSGD_TORCH_VERSION:-2.13.0}

# pip, without the notes about local package folders this machine's pip config names.
pip_install() {
    .venv/bin/pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "^WARNING: Location '.*' is ignored" || true; }
}

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# Pin torch first so no looser requirement can pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    pip_install "torch==$TORCH_VERSION"
fi
pip_install -e ".[test,plot]"

FASHION=/usr/share/datasets/fashion-mnist
if [ ! -f "$FASHION/train-images-idx3-ubyte.gz" ] && [ -z "${LSGD_DATA:-}" ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
    if command -v apt-get >/dev/null; then
        $SUDO apt-get update -qq >/dev/null
        $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
    else
        echo "warning: no apt-get; put the Fashion-MNIST IDX files in a folder and set LSGD_DATA" >&2
    fi
fi
