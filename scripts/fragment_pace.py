"""The pace of LSGD's hidden rounds against DiLoCo's, in the simulator: steps per second
(per worker, in CPU time) of W simulated workers training lsgd's GPT (or CNN7) under
each method with the same overlap, fragments and wire format, and the milliseconds each
worker spends in ``strategy.step`` beyond its optimizer step (the method's own work: its
pulls, rounds and copies; no link is modeled, so no transfer waits).

The methods take turns (each repeat runs every method once, the order rotating), and the
fastest repeat of each is kept, so that a busy machine slows them alike. Run it under two
checkouts to compare versions of lsgd (``PYTHONPATH`` picks the one imported):

    PYTHONPATH=. python scripts/fragment_pace.py --fragments 4 --overlap 3 --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH, when set, first
import lsgd  # noqa: E402
from lsgd.models import build_model  # noqa: E402
from lsgd.models.gpt import GPT  # noqa: E402

CONTEXT, WINDOWS, IMAGES = 128, 16, 128


def _data(model: str, steps: int, rank: int, windows: int
          ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(rank)
    if model == "gpt":
        rows = [torch.randint(0, 256, (windows, CONTEXT + 1), generator=g)
                for _ in range(steps)]
        return [(w[:, :-1], w[:, 1:]) for w in rows]
    return [(torch.randn(IMAGES, 1, 28, 28, generator=g),
             torch.randint(0, 10, (IMAGES,), generator=g)) for _ in range(steps)]


def worker(info: lsgd.WorkerInfo, method: str, model_name: str, knobs: dict[str, Any],
           steps: int, size: tuple[int, int, int]) -> tuple[float, float]:
    """Train ``steps`` steps; (CPU seconds of this worker's loop, CPU seconds inside
    ``strategy.step`` beyond the optimizer's own step). CPU time of the worker's own
    thread (torch runs on one thread here): the simulated workers take turns, and a
    worker's wall time would count the others' turns too."""
    torch.manual_seed(0)
    model = (GPT(layers=size[0], width=size[1]) if model_name == "gpt"
             else build_model(model_name, (1, 28, 28), 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    strategy = lsgd.make_strategy(method, model, opt, **knobs)
    optimizer_seconds, started = [0.0], [0.0]
    opt.register_step_pre_hook(lambda *_: started.__setitem__(0, time.thread_time()))
    opt.register_step_post_hook(lambda *_: optimizer_seconds.__setitem__(
        0, optimizer_seconds[0] + time.thread_time() - started[0]))
    inside = 0.0
    begin = time.thread_time()
    for x, y in _data(model_name, steps, info.rank, size[2]):
        logits = strategy.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        start = time.thread_time()
        strategy.step(loss)
        inside += time.thread_time() - start
    strategy.settle()
    return time.thread_time() - begin, inside - optimizer_seconds[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt", choices=("gpt", "cnn7"))
    parser.add_argument("--layers", type=int, default=4, help="gpt: blocks")
    parser.add_argument("--width", type=int, default=128, help="gpt: width")
    parser.add_argument("--windows", type=int, default=WINDOWS, help="gpt: batch")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--period", type=int, default=8)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--fragments", type=int, default=2)
    parser.add_argument("--compress", default="int8")
    options = parser.parse_args()
    torch.set_num_threads(1)
    common = {"period": options.period, "overlap": options.overlap,
              "fragments": options.fragments, "compress": options.compress}
    methods = {"lsgd": common, "diloco": common}
    best: dict[str, tuple[float, float]] = {}
    for repeat in range(options.repeats + 1):  # the first is an untimed warm-up
        names = list(methods)
        names = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in names:
            runs = lsgd.simulate(worker, options.workers, args=(
                name, options.model, methods[name], options.steps,
                (options.layers, options.width, options.windows)), seed=0)
            own = sum(r[1] for r in runs) / (options.workers * options.steps)
            pace = options.workers * options.steps / sum(r[0] for r in runs)
            if repeat and (name not in best or pace > best[name][0]):
                best[name] = (pace, own)
    size = (f" {options.layers} x {options.width}, {options.windows} windows"
            if options.model == "gpt" else "")
    print(f"lsgd {lsgd.__file__}; {options.model}{size}, {options.workers} workers, "
          f"{options.steps} steps, {common}")
    for name, (pace, own) in best.items():
        print(f"{name:8s} {pace:7.3f} steps/s  {1000 * own:7.3f} ms/step in the method")
    print(f"ratio lsgd/diloco {best['lsgd'][0] / best['diloco'][0]:.3f}")


if __name__ == "__main__":
    main()
