"""The names the command line offers as choices, in a module that imports nothing, so
that ``lsgd train`` refuses a bad choice before it imports torch; the modules that act
on these names import them from here.
"""

from __future__ import annotations

#: The methods by their command-line names, in :data:`lsgd.registry.STRATEGIES`' order.
METHODS = ("lsgd", "easgd", "local-sgd", "allreduce", "sgd", "dpsgd", "matcha", "al-dsgd",
           "diloco", "sparseloco", "demo", "muloco")
#: The dense wire formats of a round's all-reduce (:mod:`lsgd.comm.codec`).
CODECS = ("none", "bf16", "int8")
#: The compressed messages a round all-gathers: 2-bit values or top-k (:mod:`lsgd.comm.sparse`).
GATHERED_CODECS = ("2bit", "topk")
#: Every wire format of an averaging round (:mod:`lsgd.strategies.stages`).
ROUND_CODECS = CODECS + GATHERED_CODECS
#: The value formats of a sparse top-k message (:mod:`lsgd.comm.sparse`).
SPARSE_VALUES = ("float32", "int8", "2bit")
#: What a strategy sees as one worker: a process, or a node's (:mod:`lsgd.comm.info`).
REPLICAS = ("process", "node")
#: What a round does with the BatchNorm running statistics (:mod:`lsgd.strategies.buffers`).
BN_MODES = ("average", "pull", "local", "broadcast")
#: How an average in flight meets the steps taken meanwhile (:mod:`lsgd.strategies.stages.land`).
MERGES = ("keep", "replace", "mix")
#: The force of the round's leader (:mod:`lsgd.strategies.stages.leader_force`).
LEADERS = ("none", "weights", "pull")
#: DiLoCo's outer step: on the round's mean, or eager (:mod:`lsgd.strategies.stages.eager`).
OUTERS = ("standard", "eager")
#: Where LSGD's every-step pull is taken (:mod:`lsgd.strategies.lsgd`).
SCOPE_PULLS = ("after-step", "algorithm-1")
#: The text datasets (byte tokens, for language models; :mod:`lsgd.data`).
TEXT_DATASETS = ("kjv", "text")
#: The language models (:mod:`lsgd.models.gpt`).
LANGUAGE_MODELS = ("gpt", "hf-gpt2")
