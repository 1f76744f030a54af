#!/usr/bin/env bash
# Idempotent set-up for a new machine: a virtual environment in .venv with a
# pinned CPU build of torch and lsgd (editable, with the extras given as the
# first argument, default "test,plot"), and two Debian packages of data:
# dataset-fashion-mnist (images) and bible-kjv (the King James Bible, text).
# Safe to run again: when nothing that matters changed (pyproject.toml, the
# extras, Python, torch) the packages are not installed again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${LSGD_TORCH_VERSION:-2.13.0}
EXTRAS=${1:-test,plot}

# pip, without the notes about local package folders this machine's pip config names.
pip_install() {
    .venv/bin/pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "^WARNING: Location '.*' is ignored" || true; }
}

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.lsgd-installed-$(echo "$EXTRAS" | tr ',' '-')"
wanted="$(cat pyproject.toml; echo "$TORCH_VERSION"; .venv/bin/python --version)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] \
        && .venv/bin/python -c "import lsgd" 2>/dev/null; then
    echo "install: up to date (.venv)"
else
    # Pin torch first so no looser requirement can pull a multi-GB CUDA build.
    if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
        pip_install "torch==$TORCH_VERSION"
    fi
    pip_install -e ".[$EXTRAS]"
    printf '%s' "$wanted" > "$stamp"
fi

FASHION=/usr/share/datasets/fashion-mnist
missing=""
if [ ! -f "$FASHION/train-images-idx3-ubyte.gz" ] && [ -z "${LSGD_DATA:-}" ]; then
    missing="dataset-fashion-mnist"
fi
command -v bible >/dev/null || missing="$missing bible-kjv"
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
    if command -v apt-get >/dev/null; then
        $SUDO apt-get update -qq >/dev/null
        # shellcheck disable=SC2086  # the package names, one word each
        $SUDO apt-get install -y -qq $missing >/dev/null
    else
        echo "warning: no apt-get to install$missing; put the Fashion-MNIST IDX files in a" \
             "folder and set LSGD_DATA, and give text with --dataset text --data-dir FILE" >&2
    fi
fi
