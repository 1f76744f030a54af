"""What is trained, between the trainer and the data and models.

A :class:`Task` says what a batch is, the loss, the model, how a model is
evaluated, and which figure is the headline (and whether lower is better).
Two tasks run through the same training loop, run folder and benchmarks:

* :class:`ImageClassification`: labelled images, the papers' image models,
  test accuracy (higher is better);
* :class:`LanguageModelling`: byte-level next-token prediction on a text, a
  small GPT or Hugging Face's GPT-2 built from a config, validation loss in
  nats per byte (lower is better), with bits per byte and perplexity.
"""

from lsgd.tasks.base import (HEADLINES, Batch, Sums, Task, best, bits_per_byte, perplexity,
                             reaches)
from lsgd.tasks.images import ImageClassification, image_steps_per_epoch
from lsgd.tasks.language import LanguageModelling

__all__ = [
    "HEADLINES",
    "Batch",
    "ImageClassification",
    "LanguageModelling",
    "Sums",
    "Task",
    "best",
    "bits_per_byte",
    "image_steps_per_epoch",
    "perplexity",
    "reaches",
]
