"""The regime's 20-tokens-per-parameter point on a GPU, with a larger GPT: all-reduce,
DiLoCo and the best sparse form at equal tokens.

lsgd's GPT of 4 blocks, width 192, 4 heads and a 128-byte context (1,853,568
parameters) on the King James Bible, 4 workers as 4 nodes in the simulator on one CUDA
device, 20 tokens per parameter: 2,263 steps of 32 windows per worker. One seed, the
points the CPU study (``studies/regime.py``) chose at this budget, scaled to the batch:
all-reduce, DiLoCo (int8 rounds every 16 steps) and MuLoCo (2-bit rounds every 16
steps). The table: the validation loss at the end, the gap to all-reduce, the bytes
each worker sent. ``scripts/gpu-check.sh`` runs it where CUDA is (it needs
``--device cuda``); ``--quick`` is a one-block GPT for a few steps, on any device.

    python studies/regime_gpu.py --device cuda --out records/gpu/regime
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result
from studies import study
from studies.common import DEVICE, script

NAME = "regime-gpu"
PARAMETERS, WORKERS = 1_853_568, 4
#: the task, :data:`studies.study.TASKS` ``"language-gpu"`` (where worker processes find it)
TASK = study.TASKS["language-gpu"]
CONTEXT, BATCH = TASK["settings"]["context"], TASK["settings"]["batch_size"]
STEPS = TASK["steps"]
VARIANTS = {
    "allreduce": {"method": "allreduce", "lr": 0.004},
    "diloco int8": {"method": "diloco", "compress": "int8", "period": 16, "outer_lr": 0.35,
                    "lr": 0.004},
    "muloco 2bit": {"method": "muloco", "period": 16, "lr": 0.004},
}
FLAGS: dict[str, dict[str, Any]] = {"--device": DEVICE}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    task = "language-quick" if quick else "language-gpu"
    results = study.run_variants(out, task, VARIANTS, [0], options)
    summary = study.summarize(task, results, list(VARIANTS))
    reference = summary[0]
    rows = [[s["label"], study.cell(s["final"], 3),
             f"{100 * (s['final'][0] / reference['final'][0] - 1):+.1f}%"
             if s is not reference else "", round(s["mb"], 1)] for s in summary]
    notes = [f"{PARAMETERS:,} parameters, 20 tokens per parameter ({STEPS} steps of {BATCH} "
             f"windows of {CONTEXT} bytes per worker), 4 workers as 4 nodes on one device "
             f"({options.get('device') or 'auto'}), seed 0; the center's validation loss "
             "(nats/byte) at the end, its gap to all-reduce, MB each worker sent."]
    return Result(NAME, "The regime's 20 tokens per parameter on a GPU, a larger GPT",
                  ["method", "loss at the end", "gap", "MB sent/worker"], rows, notes,
                  {"runs": results})


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
