"""The language model's training steps per second on one device: lsgd's GPT at its default
size (4 blocks, width 128) and at 12 blocks of width 768, 16 windows of 128 bytes per
step, AdamW, in float32 and under bfloat16 autocast; a JSON record with the device and
torch's version. Run by scripts/gpu-check.sh.

    python scripts/gpu_steps.py --out records/gpu/steps.json [--device cuda] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lsgd.models.gpt import GPT, count_parameters  # noqa: E402

SIZES = {"default (4 x 128)": (4, 128, 4), "12 x 768": (12, 768, 12)}
CONTEXT, WINDOWS = 128, 16


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def steps_per_second(layers: int, width: int, heads: int, device: torch.device, steps: int,
                     bf16: bool) -> tuple[float, int]:
    torch.manual_seed(0)
    model = GPT(256, CONTEXT, layers, width, heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 256, (WINDOWS, CONTEXT + 1), device=device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(data[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), data[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):  # warm-up: kernels chosen, memory allocated
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps / (time.perf_counter() - start), count_parameters(model)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSON record to write")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_steps: no CUDA device here", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    rows = []
    for label, (layers, width, heads) in SIZES.items():
        for bf16 in (False, True):
            rate, values = steps_per_second(layers, width, heads, device, args.steps, bf16)
            rows.append({"model": label, "parameters": values,
                         "precision": "bf16 autocast" if bf16 else "float32",
                         "steps_per_second": round(rate, 2),
                         "tokens_per_second": round(rate * WINDOWS * CONTEXT)})
            print(f"{label:>18}  {rows[-1]['precision']:>13}  {values / 1e6:6.2f} M values  "
                  f"{rate:8.2f} steps/s", flush=True)
    record = {"device": torch.cuda.get_device_name(device) if device.type == "cuda"
              else platform.processor() or platform.machine(),
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "windows": WINDOWS, "context": CONTEXT, "optimizer": "AdamW",
              "steps_timed": args.steps, "date": time.strftime("%Y-%m-%d %H:%M"),
              "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
