"""Train Hugging Face's GPT-2, built from a config, on the King James Bible with lsgd.

A user's own training loop: the model is ``transformers.GPT2LMHeadModel`` (no
weights downloaded: a small config, byte tokens), its loss its own
(``model(input_ids=x, labels=x).loss``), the data a contiguous shard of the
text per worker. lsgd adds a strategy around the model and optimizer and a
``strategy.step(loss)`` in the loop; the same loop runs DiLoCo with its rounds
hidden and sent as int8, LSGD, and all-reduce, in the simulator (threads of this
process) or as worker processes (gloo).

    pip install 'lsgd[hf]'                      # transformers
    python examples/language_model.py           # diloco, lsgd, allreduce; 4 simulated workers
    python examples/language_model.py --backend processes --steps 300
    python examples/language_model.py --text my_corpus.txt --methods diloco
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import torch

import lsgd
from lsgd.data.text import kjv, text_shard, user_text, windows

CONTEXT = 64
#: Each method's knobs: DiLoCo's rounds every 32 steps, hidden behind 4 and sent as int8.
METHODS = {
    "diloco": {"period": 32, "overlap": 4, "compress": "int8"},
    "lsgd": {"period": 8, "pull": 0.1, "scope": 0.01},
    "allreduce": {},
}


def gpt2(context: int = CONTEXT) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=256, n_positions=context, n_embd=96, n_layer=3, n_head=3,
                        bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config)


def train(info: lsgd.WorkerInfo, method: str, steps: int, path: str | None) -> dict[str, Any]:
    """One worker: its shard of the text, its own AdamW, the method's strategy."""
    data = user_text(path) if path else kjv()
    torch.manual_seed(0)  # the same initial model on every worker
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    strategy = lsgd.make_strategy(method, model, opt, **METHODS[method])     # lsgd
    start, stop = text_shard(len(data.train), info.rank, info.world_size)
    g = torch.Generator().manual_seed(1 + info.rank)
    began = time.perf_counter()
    for _ in range(steps):
        x, _ = windows(data.train, torch.randint(start, stop - CONTEXT, (8,), generator=g), CONTEXT)
        loss = strategy.model(input_ids=x, labels=x).loss                    # lsgd
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)                                                   # lsgd
    seconds = time.perf_counter() - began
    center = strategy.center()                                                # lsgd
    report = strategy.report()                                                # lsgd
    result = {"method": method, "seconds": seconds, "mb_sent": report.bytes_sent / 1e6}
    if info.rank == 0:  # the validation loss of the workers' average, once
        starts = torch.linspace(0, len(data.valid) - CONTEXT - 1, 64).long()
        x, _ = windows(data.valid, starts, CONTEXT)
        with torch.no_grad():
            result["validation_loss"] = float(center.eval()(input_ids=x, labels=x).loss)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="diloco,lsgd,allreduce")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backend", choices=("threads", "processes"), default="threads")
    parser.add_argument("--text", default=None, help="a UTF-8 file or folder (default: KJV)")
    args = parser.parse_args()
    run = lsgd.simulate if args.backend == "threads" else lsgd.launch
    print(f"{'method':<10} {'val loss':>9} {'bits/byte':>9} {'MB sent/worker':>15} {'s':>6}")
    for method in args.methods.split(","):
        first = run(train, args.workers, args=(method, args.steps, args.text))[0]
        loss = first["validation_loss"]
        print(f"{method:<10} {loss:>9.3f} {loss / math.log(2):>9.3f} {first['mb_sent']:>15.2f} "
              f"{first['seconds']:>6.1f}")


if __name__ == "__main__":
    main()
