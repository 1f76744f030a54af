"""Train Hugging Face's GPT-2 on the King James Bible with PyTorch Lightning and lsgd's DiLoCo.

A LightningModule around ``transformers.GPT2LMHeadModel`` (built from a small config, byte
tokens) trained by ``Trainer(accelerator="cpu", devices=2, strategy=LSGDStrategy(...))``:
each worker steps on its own shard of the text, and the workers meet only at the method's
rounds (no gradient all-reduce per step). ``--runner loop`` trains the same model on the
same data, seed and knobs in lsgd's own loop (``lsgd.launch``), for comparison.

    pip install 'lsgd[lightning]'                             # pytorch-lightning, transformers
    python examples/lightning_bible.py                        # DiLoCo, 2 workers, 128 steps
    python examples/lightning_bible.py --runner both --seeds 0,1,2 --out runs/bible
    python examples/lightning_bible.py --method lsgd --steps 256

Each run prints (and with ``--out`` writes as JSON) its final validation loss: that of the
workers' average model on 64 fixed windows of the held-out chapters.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import lsgd
from lsgd.data.text import TextData, kjv, text_shard, windows

CONTEXT = 64
BATCH = 8
LR = 1e-3
WORKERS = 2
#: Each method's knobs (any other lsgd method runs with its defaults).
METHODS: dict[str, dict[str, Any]] = {
    "diloco": {"period": 16},
    "lsgd": {"period": 8, "pull": 0.1, "scope": 0.01},
    "local-sgd": {"period": 16},
}


def gpt2(context: int = CONTEXT) -> torch.nn.Module:
    """GPT-2 from a small config (no weights downloaded), a vocabulary of 256 bytes."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=256, n_positions=context, n_embd=96, n_layer=3, n_head=3,
                        bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config)


def batch_starts(data: TextData, rank: int, world: int, steps: int, seed: int) -> torch.Tensor:
    """Worker ``rank``'s window starts, ``[steps, BATCH]``: random in its own shard."""
    start, stop = text_shard(len(data.train), rank, world)
    g = torch.Generator().manual_seed(1000 * seed + 1 + rank)
    return torch.randint(start, stop - CONTEXT, (steps, BATCH), generator=g)


def validation_loss(model: torch.nn.Module, data: TextData) -> float:
    """The mean loss of ``model`` on 64 fixed windows of the held-out text."""
    x, _ = windows(data.valid, torch.linspace(0, len(data.valid) - CONTEXT - 1, 64).long(),
                   CONTEXT)
    was_training = model.training
    with torch.no_grad():
        loss = float(model.eval()(input_ids=x, labels=x).loss)
    model.train(was_training)
    return loss


def knobs_of(method: str) -> dict[str, Any]:
    return dict(METHODS.get(method, {}))


# -- lsgd's own loop ---------------------------------------------------------------------
def loop_train(info: lsgd.WorkerInfo, method: str, steps: int, seeds: Sequence[int]
               ) -> list[dict[str, Any]]:
    """One worker of lsgd's own loop, once per seed: the same model, optimizer, data and
    knobs as the Lightning run."""
    data, results = kjv(), []
    for seed in seeds:
        torch.manual_seed(seed)
        model = gpt2()
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
        strategy = lsgd.make_strategy(method, model, opt, **knobs_of(method))
        start_loss = validation_loss(model, data)
        for starts in batch_starts(data, info.rank, info.world_size, steps, seed):
            x, _ = windows(data.train, starts, CONTEXT)
            loss = strategy.model(input_ids=x, labels=x).loss
            opt.zero_grad()
            loss.backward()
            strategy.step(loss)
        center = strategy.center()
        results.append({"runner": "loop", "method": method, "seed": seed, "steps": steps,
                        "start_loss": start_loss, "validation_loss": validation_loss(center, data),
                        "report": dataclasses.asdict(strategy.report())})
    return results


def fit_loop(method: str, steps: int, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """lsgd's loop on :data:`WORKERS` processes, a run per seed; rank 0's results."""
    return lsgd.launch(loop_train, WORKERS, args=(method, steps, list(seeds)))[0]


# -- Lightning ---------------------------------------------------------------------------
def lightning_module(method: str, steps: int, seed: int, out: Path | None) -> Any:
    """The LightningModule: GPT-2, AdamW, each worker's batches; at the end, every worker
    writes its result (``out/lightning-rank-R.json``)."""
    import pytorch_lightning as pl

    class Bible(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(seed)
            self.model = gpt2()
            self.data = kjv()
            self.result: dict[str, Any] = {"runner": "lightning", "method": method,
                                           "seed": seed, "steps": steps}

        def train_dataloader(self) -> torch.utils.data.DataLoader:
            # This worker's own batches, in order, as in lsgd's loop (the Trainer's
            # use_distributed_sampler=False: no sampler shuffles them across the workers).
            starts = batch_starts(self.data, self.global_rank, self.trainer.world_size, steps,
                                  seed)
            x, _ = windows(self.data.train, starts.reshape(-1), CONTEXT)
            # A generator of its own: the global random state (dropout's) stays as in the loop.
            return torch.utils.data.DataLoader(x, batch_size=BATCH, shuffle=False,
                                               generator=torch.Generator())

        def training_step(self, x: torch.Tensor, index: int) -> torch.Tensor:
            loss = self.model(input_ids=x, labels=x).loss
            self.log("train_loss", loss, prog_bar=True)  # this worker's: no all-reduce
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=LR, weight_decay=0.1)

        def on_train_start(self) -> None:
            self.result["start_loss"] = validation_loss(self.model, self.data)

        def on_train_end(self) -> None:
            method = self.trainer.strategy.method  # the lsgd strategy
            center = method.center()  # the workers' average (one all-reduce)
            self.result |= {"validation_loss": validation_loss(center.model, self.data),
                            "report": dataclasses.asdict(method.report()),
                            "params": [float(p.detach().double().sum())
                                       for p in self.parameters()]}
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                (out / f"lightning-rank-{self.global_rank}.json").write_text(
                    json.dumps(self.result, indent=1))

    return Bible()


def fit_lightning(method: str, steps: int, seed: int, out: Path | None = None, *,
                  start_method: str = "popen", checkpoint_every: int = 0,
                  checkpoints: Path | None = None, ckpt_path: str | None = None,
                  callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Fit with ``Trainer(accelerator="cpu", devices=2, strategy=LSGDStrategy(...))``; with
    ``checkpoint_every``, a checkpoint every that many steps in ``checkpoints``; from
    ``ckpt_path``, a resumed run. Returns this process's result."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from lsgd.integrations.lightning import LSGDStrategy

    saving = [ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=checkpoint_every,
                              save_top_k=-1)] if checkpoint_every else []
    module = lightning_module(method, steps, seed, out)
    trainer = pl.Trainer(accelerator="cpu", devices=WORKERS, max_steps=steps,
                         strategy=LSGDStrategy(method, start_method=start_method,
                                               **knobs_of(method)),
                         callbacks=[*saving, *callbacks], enable_checkpointing=bool(saving),
                         use_distributed_sampler=False,
                         logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, ckpt_path=ckpt_path)
    return module.result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="diloco", help="an lsgd method (not allreduce)")
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, one run each")
    parser.add_argument("--runner", choices=("lightning", "loop", "both"), default="lightning")
    parser.add_argument("--out", type=Path, default=None, help="a folder for the results")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps (0: none)")
    parser.add_argument("--resume", default=None, help="a checkpoint to continue from")
    args = parser.parse_args()
    # Lightning starts worker 1 as this script again (LOCAL_RANK set): it runs the
    # Lightning fits only, and says nothing.
    first = int(os.environ.get("LOCAL_RANK", "0")) == 0
    seeds = [int(seed) for seed in args.seeds.split(",")]
    results = []
    if args.runner in ("loop", "both") and first:  # before Lightning sets up its group
        results += fit_loop(args.method, args.steps, seeds)
    for seed in seeds:
        if args.runner in ("lightning", "both"):
            results.append(fit_lightning(
                args.method, args.steps, seed, args.out, checkpoint_every=args.checkpoint_every,
                checkpoints=None if args.out is None else args.out / "checkpoints",
                ckpt_path=args.resume))
    if not first:
        return
    for r in results:
        print(f"{r['runner']:<9} {r['method']} seed {r['seed']}: validation loss "
              f"{r['start_loss']:.3f} -> {r['validation_loss']:.3f} "
              f"({r['validation_loss'] / math.log(2):.3f} bits/byte), rounds "
              f"{r['report']['rounds']}, {r['report']['bytes_sent'] / 1e6:.2f} MB sent")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
