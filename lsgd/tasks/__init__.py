"""What is trained, between the trainer and the data and models: a :class:`Task`
(:class:`ImageClassification` or :class:`LanguageModelling`, picked by :func:`make_task`)
says what a batch is, the loss, the model, its evaluation and the headline figure. The
names are imported on first use, so the torch-free :mod:`lsgd.tasks.headline` can be
read without the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name, and the module it comes from.
_SOURCES: dict[str, str] = {
    **dict.fromkeys(("HEADLINES", "best", "reaches"), "lsgd.tasks.headline"),
    **dict.fromkeys(("Batch", "Sums", "Task", "bits_per_byte", "perplexity"),
                    "lsgd.tasks.task"),
    **dict.fromkeys(("ImageClassification", "image_steps_per_epoch"), "lsgd.tasks.images"),
    "LanguageModelling": "lsgd.tasks.language",
    "make_task": "lsgd.tasks.factory"}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from lsgd.tasks.task import Batch, Sums, Task, bits_per_byte, perplexity
    from lsgd.tasks.factory import make_task
    from lsgd.tasks.headline import HEADLINES, best, reaches
    from lsgd.tasks.images import ImageClassification, image_steps_per_epoch
    from lsgd.tasks.language import LanguageModelling
