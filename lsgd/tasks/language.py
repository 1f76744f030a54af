"""Language modelling: next-byte prediction on a text, a transformer, validation loss.

Tokens are bytes (:mod:`lsgd.data.text`). Worker ``r`` of ``W`` trains on an exclusive
contiguous shard of the training bytes, each batch ``batch_size`` windows of ``context + 1``
bytes at random places in it (drawn from the worker's generator); an epoch is as many
batches as the shard holds windows of ``context`` new bytes. Evaluation reads about
``eval_tokens`` bytes of the validation text (all of it with 0) as the same evenly spread
windows every time, workers taking interleaved slices. Rows carry the validation loss in
nats per byte (the headline), bits per byte, perplexity and next-byte accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from lsgd.data.text import TextData, text_shard, windows
from lsgd.models.gpt import build_language_model, count_parameters
from lsgd.tasks.task import Batch, Task, bits_per_byte, perplexity

EVAL_WINDOWS = 64  # windows per evaluation batch


class LanguageModelling(Task):
    """Next-byte prediction on ``data`` with the model ``model`` (see the module docstring)."""

    kind = "language"
    metric = "loss"

    def __init__(self, data: TextData, *, model: str = "gpt", context: int = 128,
                 layers: int = 4, width: int = 128, heads: int = 4, batch_size: int = 16,
                 workers: int = 1, eval_tokens: int = 65536,
                 device: torch.device | None = None) -> None:
        self.data, self.model_name = data, model
        self.sizes = {"context": context, "layers": layers, "width": width, "heads": heads}
        self.context, self.batch_size = context, batch_size
        self.device = device or torch.device("cpu")
        shortest = len(data.train) // workers
        if shortest < context + 1:
            raise ValueError(
                f"{data.source}: a worker's share of the training text ({shortest} bytes of "
                f"{len(data.train)}, {workers} workers) is shorter than one window of "
                f"context={context} + 1 bytes; give more text, a shorter context or "
                "fewer workers")
        if len(data.valid) < context + 1:
            raise ValueError(
                f"{data.source}: its validation text ({data.split}: {len(data.valid)} bytes) "
                f"is shorter than one window of context={context} + 1 bytes; give more "
                "text or a shorter context")
        self.steps_per_epoch = max(1, shortest // (batch_size * context))
        self.eval_starts = _spread(len(data.valid) - context - 1, context, eval_tokens)

    def build_model(self) -> nn.Module:
        return build_language_model(self.model_name, self.data.vocab, **self.sizes)

    def shard(self, rank: int, world: int) -> tuple[int, int]:
        """Worker ``rank``'s bytes of the training text: ``[start, stop)``."""
        return text_shard(len(self.data.train), rank, world)

    def train_batch(self, rank: int, world: int, epoch: int, index: int,
                    generator: torch.Generator) -> Batch:
        start, stop = self.shard(rank, world)
        starts = torch.randint(start, stop - self.context, (self.batch_size,),
                               generator=generator)
        x, y = windows(self.data.train, starts, self.context)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def eval_batches(self, part: int = 0, parts: int = 1) -> Iterator[Batch]:
        for starts in self.eval_starts[part::parts].split(EVAL_WINDOWS):
            x, y = windows(self.data.valid, starts, self.context)
            yield x.to(self.device), y.to(self.device)

    def columns(self, who: str, loss: float, accuracy: float) -> dict[str, float]:
        return {**super().columns(who, loss, accuracy),
                f"{who}_bits_per_byte": bits_per_byte(loss),
                f"{who}_perplexity": perplexity(loss)}

    def summary(self, rows: list[dict[str, float]]) -> dict[str, object]:
        last = rows[-1]["center_loss"] if rows else float("nan")
        return {**super().summary(rows), "validation_loss": last,
                "bits_per_byte": bits_per_byte(last), "perplexity": perplexity(last)}

    def describe(self) -> str:
        with torch.device("meta"):
            params = count_parameters(self.build_model())
        sizes = ", ".join(f"{k} {v}" for k, v in self.sizes.items())
        return (f"{self.data.name}: {len(self.data.train):,} training and "
                f"{len(self.data.valid):,} validation bytes ({self.data.split}); "
                f"{self.model_name} ({sizes}): {params:,} parameters, "
                f"{4 * params / 1e6:.2f} MB as float32; {len(self.eval_starts)} validation "
                f"windows of {self.context} bytes per evaluation")


def _spread(last: int, context: int, tokens: int) -> torch.Tensor:
    """Window starts in ``[0, last]`` for about ``tokens`` predictions (every window if
    ``tokens`` is 0 or they would overlap), spread evenly."""
    whole = last // context + 1  # non-overlapping windows that fit
    count = whole if tokens <= 0 else max(1, min(whole, tokens // context))
    if count == 1:
        return torch.zeros(1, dtype=torch.long)
    return torch.linspace(0, last, count).round().long()
