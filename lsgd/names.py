"""The names the command line offers as choices, in a module that imports nothing.

``lsgd train`` builds its flags from :class:`~lsgd.train.config.TrainConfig` and must
refuse a bad flag or choice before it imports torch (a fraction of a second rather
than seconds). The modules that act on these names (the communicators, the
strategies, the data, the models, the registry) import torch, and so do their
packages' ``__init__``, so each table lives here, once, and those modules import it
from here. Only tuples of strings, at the bottom of every layer: what a name does is
the business of the module that acts on it.
"""

from __future__ import annotations

#: The methods by their command-line names, in the registry's order
#: (:data:`lsgd.registry.STRATEGIES`, each class's ``name``).
METHODS = ("lsgd", "easgd", "local-sgd", "allreduce", "sgd", "dpsgd", "matcha", "al-dsgd",
           "diloco")
#: The wire formats of a round (:mod:`lsgd.comm.codec`).
CODECS = ("none", "bf16", "int8")
#: What a strategy sees as one worker: every process, or every node's processes together
#: (:mod:`lsgd.comm.info`).
REPLICAS = ("process", "node")
#: What a round does with the BatchNorm running statistics (:mod:`lsgd.strategies.buffers`).
BN_MODES = ("average", "pull", "local", "broadcast")
#: How an average that was in flight meets the steps taken meanwhile
#: (:mod:`lsgd.strategies.averaging`).
MERGES = ("keep", "replace", "mix")
#: The force of the round's leader on an averaging method (:mod:`lsgd.strategies.leader_force`).
LEADERS = ("none", "weights", "pull")
#: DiLoCo's outer step: on the round's mean, or eager (:mod:`lsgd.strategies.eager`).
OUTERS = ("standard", "eager")
#: Where LSGD's every-step pull is taken (:mod:`lsgd.strategies.lsgd`).
SCOPE_PULLS = ("after-step", "algorithm-1")
#: The text datasets (byte tokens, for language models; :mod:`lsgd.data`).
TEXT_DATASETS = ("kjv", "text")
#: The language models (:mod:`lsgd.models.gpt`).
LANGUAGE_MODELS = ("gpt", "hf-gpt2")
