"""Train Hugging Face's GPT-2 on the King James Bible under ``accelerate launch`` with an lsgd
method (DiLoCo by default) in place of DDP's gradient all-reduce at every step.

A plain Accelerate loop, and the three lines that make it DiLoCo (``+``, ``-``)::

      model, optimizer = accelerator.prepare(model, optimizer)
    + import lsgd.integrations.accelerate as lsgd_accelerate
    + method = lsgd_accelerate.prepare(accelerator, model, optimizer, "diloco", period=8)
      for x in batches:
          with accelerator.accumulate(model):
              loss = model(input_ids=x, labels=x).loss
              accelerator.backward(loss)
    -         optimizer.step()
    +         method.step(loss)
              optimizer.zero_grad()

The model is ``transformers.GPT2LMHeadModel`` from a small config (byte tokens, no weights
downloaded), each process trains on its own contiguous shard of the text, and the final
validation loss is that of the processes' average model. ``--loop lsgd`` runs the same
training (data, seed, model, knobs, accumulation, bf16 autocast) in lsgd's own loop,
``lsgd.launch(train, world_size)``, for comparison.

    # two CPU processes, everything on the command line (no accelerate config needed):
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \\
        --mixed_precision bf16 --dynamo_backend no --main_process_port 29512 \\
        examples/accelerate_bible.py --method diloco --steps 240 --accumulate 2
    # the same training in lsgd's own loop:
    python examples/accelerate_bible.py --loop lsgd --mixed-precision bf16 \\
        --method diloco --steps 240 --accumulate 2

On GPUs, leave out ``ACCELERATE_USE_CPU=1``: ``--num_processes`` is then the number of GPUs.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from language_model import gpt2  # examples/, this script's folder

import lsgd
from lsgd.data.text import TextData, kjv, text_shard, windows

CONTEXT, BATCH, LR = 64, 8, 1e-3
#: Each method's knobs (any other lsgd method runs with its defaults).
KNOBS: dict[str, dict[str, Any]] = {
    "diloco": {"period": 8},
    "lsgd": {"period": 8, "pull": 0.1, "scope": 0.01},
    "local-sgd": {"period": 8},
    "allreduce": {},
}


def batches(data: TextData, rank: int, world_size: int, seed: int) -> Any:
    """This worker's random windows of its shard, forever (the same in both loops)."""
    start, stop = text_shard(len(data.train), rank, world_size)
    g = torch.Generator().manual_seed(1000 * seed + 1 + rank)
    while True:
        yield windows(data.train, torch.randint(start, stop - CONTEXT, (BATCH,), generator=g),
                      CONTEXT)[0]


def validation_loss(model: torch.nn.Module, data: TextData) -> float:
    """The loss of ``model``'s weights on 64 fixed windows of the held-out text, in float32."""
    fresh = gpt2().eval()  # without Accelerate's autocast wrapper around forward
    fresh.load_state_dict(model.state_dict())
    x, _ = windows(data.valid, torch.linspace(0, len(data.valid) - CONTEXT - 1, 64).long(),
                   CONTEXT)
    with torch.no_grad():
        return float(fresh(input_ids=x, labels=x).loss)


def new_model(args: argparse.Namespace) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(args.seed)  # the same initial model on every worker
    model = gpt2()
    return model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)


def accelerate_main(args: argparse.Namespace) -> dict[str, Any] | None:
    """This process's part of the run under ``accelerate launch``; the result on the main
    process, None on the others."""
    from accelerate import Accelerator

    import lsgd.integrations.accelerate as lsgd_accelerate

    accelerator = Accelerator(mixed_precision=args.mixed_precision,
                              gradient_accumulation_steps=args.accumulate)
    with accelerator.main_process_first():  # the first extracts the text into the cache
        data = kjv()
    model, optimizer = new_model(args)
    initial = validation_loss(model, data)
    model, optimizer = accelerator.prepare(model, optimizer)
    method = lsgd_accelerate.prepare(accelerator, model, optimizer, args.method,
                                     **KNOBS.get(args.method, {}))
    stream = batches(data, accelerator.process_index, accelerator.num_processes, args.seed)
    began = time.perf_counter()
    for _ in range(args.steps):
        with accelerator.accumulate(model):
            x = next(stream).to(accelerator.device)
            loss = model(input_ids=x, labels=x).loss
            accelerator.backward(loss)
            method.step(loss)
            optimizer.zero_grad()
    seconds = time.perf_counter() - began
    if args.save:
        accelerator.save_state(args.save)
    # allreduce is Accelerate's DDP: a gradient all-reduce every step, its bytes not counted
    sent = method.strategy.report().bytes_sent / 1e6 if method.strategy else None
    rounds = method.strategy.rounds if method.strategy else method.steps
    center = method.center()  # one all-reduce: every process takes part
    if not accelerator.is_main_process:
        return None
    return {"loop": "accelerate", "method": args.method, "seed": args.seed,
            "workers": accelerator.num_processes, "micro_steps": args.steps,
            "optimizer_steps": method.steps, "rounds": rounds, "seconds": seconds,
            "mb_sent": sent, "initial_validation_loss": initial,
            "validation_loss": validation_loss(center, data)}


def lsgd_worker(info: lsgd.WorkerInfo, args: argparse.Namespace) -> dict[str, Any]:
    """One worker of the same training in lsgd's own loop."""
    data = kjv()
    model, optimizer = new_model(args)
    initial = validation_loss(model, data)
    strategy = lsgd.make_strategy(args.method, model, optimizer, **KNOBS.get(args.method, {}))
    stream = batches(data, info.rank, info.world_size, args.seed)
    bf16 = args.mixed_precision == "bf16"
    began = time.perf_counter()
    for _ in range(args.steps // args.accumulate):
        for _ in range(args.accumulate):
            x = next(stream)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = strategy.model(input_ids=x, labels=x).loss
            (loss / args.accumulate).backward()
        strategy.step(loss)
        optimizer.zero_grad()
    seconds = time.perf_counter() - began
    report, center = strategy.report(), strategy.center()
    return {"loop": "lsgd", "method": args.method, "seed": args.seed,
            "workers": info.world_size, "micro_steps": args.steps,
            "optimizer_steps": strategy.steps, "rounds": strategy.rounds, "seconds": seconds,
            "mb_sent": report.bytes_sent / 1e6, "initial_validation_loss": initial,
            "validation_loss": validation_loss(center, data) if info.rank == 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="diloco", help="an lsgd method (lsgd train's names)")
    parser.add_argument("--steps", type=int, default=240,
                        help="micro-batches per worker; optimizer steps are steps / accumulate")
    parser.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps")
    parser.add_argument("--mixed-precision", choices=("no", "bf16", "fp16"), default=None,
                        help="default: accelerate launch's --mixed_precision (no for --loop lsgd)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loop", choices=("accelerate", "lsgd"), default="accelerate",
                        help="accelerate: this process under accelerate launch; lsgd: "
                             "lsgd.launch(train, --workers) on CPU")
    parser.add_argument("--workers", type=int, default=2, help="--loop lsgd's processes")
    parser.add_argument("--threads", type=int, default=1,
                        help="--loop lsgd's threads per process (accelerate launch's "
                             "--num_cpu_threads_per_process, 1 by default)")
    parser.add_argument("--save", default=None, help="accelerator.save_state here at the end")
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    args = parser.parse_args()
    if args.steps < 1 or args.accumulate < 1 or args.steps % args.accumulate:
        parser.error(f"--steps {args.steps} must be a positive multiple of --accumulate "
                     f"{args.accumulate}")
    if args.loop == "lsgd" and args.mixed_precision == "fp16":
        parser.error("--loop lsgd runs on CPU: --mixed-precision no or bf16")
    if args.loop == "lsgd":
        result = lsgd.launch(lsgd_worker, args.workers, args=(args,),
                             threads_per_worker=args.threads)[0]
    elif (result := accelerate_main(args)) is None:
        return
    loss, sent = result["validation_loss"], result["mb_sent"]
    print(f"{result['loop']} {result['method']} seed {args.seed}: validation loss "
          f"{result['initial_validation_loss']:.3f} -> {loss:.3f} ({loss / math.log(2):.3f} "
          f"bits/byte), {result['optimizer_steps']} steps, {result['rounds']} rounds, "
          f"{'DDP: not counted' if sent is None else f'{sent:.2f} MB sent'} per worker, "
          f"{result['seconds']:.1f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
