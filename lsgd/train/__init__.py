"""The ``lsgd train`` command: the papers' training setup as a run folder."""

from lsgd.train.config import TrainConfig

__all__ = ["TrainConfig"]
