"""Which task a run trains: decided here, from its data, once."""

from __future__ import annotations

import torch

from lsgd.data import Dataset, ImageFolder, TextData
from lsgd.tasks.task import Task
from lsgd.tasks.images import ImageClassification
from lsgd.tasks.language import LanguageModelling


def make_task(data: Dataset | ImageFolder | TextData, *, dataset: str, model: str,
              batch_size: int, workers: int = 1, seed: int = 0, augment: str = "auto",
              context: int = 128, layers: int = 4, width: int = 128, heads: int = 4,
              eval_tokens: int = 65536, device: torch.device | None = None) -> Task:
    """The task that trains ``model`` on ``data`` (the dataset called ``dataset``):
    language modelling on a text (with the transformer's sizes ``context``, ``layers``,
    ``width``, ``heads`` and ``eval_tokens`` bytes per evaluation), image classification
    otherwise (with the augmentation preset ``augment``); ``ValueError`` for what does
    not fit (a batch larger than a worker's shard, a text shorter than a window)."""
    if isinstance(data, TextData):
        return LanguageModelling(data, model=model, context=context, layers=layers,
                                 width=width, heads=heads, batch_size=batch_size,
                                 workers=workers, eval_tokens=eval_tokens, device=device)
    return ImageClassification(data, dataset=dataset, model=model, augment_preset=augment,
                               batch_size=batch_size, workers=workers, seed=seed,
                               device=device)
