#!/usr/bin/env bash
# The GPU check: one command of a few minutes for a machine with CUDA, no network and a
# Python that already has a CUDA build of torch (lsgd runs from this checkout). It runs the
# tests marked cuda (every method on CUDA tensors in the simulator, the codecs on CUDA
# against the CPU, two gloo processes sharing one GPU, a replica of two processes with
# NCCL inside where there are two GPUs), then the language model's steps per second at
# the default size and at 12 blocks of width 768, then the regime study's point of 20
# tokens per parameter with a larger GPT (studies/regime_gpu.py: lsgd train's own
# requirements, tomli-w and tqdm, must import). Records go to records/gpu/ (and to
# $OUT/gpu when OUT is set): the device, torch's version, the tests' outcome, the rates.
# Without CUDA it says so and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing run"
    exit 0
fi
export PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p records/gpu
"$PYTHON" - <<'EOF' | tee records/gpu/device.txt
import torch
print(f"device: {torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} visible)")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
status=0
# --noconftest: the tests' conftest imports the trainer, whose requirements (tomli-w) a
# GPU machine's Python may lack; the cuda tests need only the library.
"$PYTHON" -m pytest -q -m cuda --noconftest -p no:cacheprovider -rs tests/strategies/test_cuda.py \
    2>&1 | tee records/gpu/tests.txt || status=1
"$PYTHON" scripts/gpu_steps.py --out records/gpu/steps.json || status=1
# The regime's 20-tokens-per-parameter point with a larger GPT (about 6 minutes on an H100).
timeout 480 "$PYTHON" studies/regime_gpu.py --device cuda --out records/gpu/regime \
    2>&1 | tail -12 | tee records/gpu/regime.txt || status=1
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/gpu" && cp records/gpu/* "$OUT/gpu/"
fi
exit $status
