"""``lsgd plan`` and ``lsgd.plan(...)``: which method, how often, and what it costs on a
link, before training.

The model is the simulator's clock (:mod:`lsgd.comm.world`) on its link model
(:class:`~lsgd.comm.wire.LinkModel`: one link per node, free inside it), replayed
for one worker of a symmetric run (:mod:`lsgd.planner.schedules`). Every step costs
the compute; per step or per round (period ``H``) each form sends:

* ``allreduce``: the gradients, one blocking ring all-reduce every step
  (``-bf16``: in bfloat16; ``-powersgd``: PyTorch's three all-reduces of the
  uncompressed tensors and the P and Q factors, after its warm-up);
* ``diloco`` (``sparseloco``, ``muloco``): every ``H`` steps the state (or one of
  ``F`` fragments every ``H/F`` steps, ``-streaming``), all-reduced in its codec
  (``bf16``, ``int8``: an all-to-all of encoded parts and an all-gather) or
  all-gathered when top-k or 2-bit (SparseLoCo's top ``density`` of every chunk,
  MuLoCo's 2-bit values); blocking, or hidden behind ``K`` steps (``-hidden``)
  or the whole next period (``-eager``) on the bulk lane;
* ``demo``: every step the top ``topk`` DCT coefficients of every block of each
  parameter, all-gathered (blocking, or landing a step later);
* ``lsgd``: every global period the leader's state (or its fragments) broadcast
  along the pipelined chain of the nodes, after the scores' all-gather (blocking
  at the round, or a step early on the control lane); ``-hidden``: the broadcast
  lands ``K`` steps later. Rounds inside a node cross no link and cost nothing.

A hidden transfer *waits* for what is left of it when it lands; the rest *hides*
behind compute. Left out: replicas of a node's processes (``--replica node``): the
simulator charges each of a node's P peer collectives the whole link at once, where
they share one link, so no figure could match both; BatchNorm statistics (one more
small collective a round), LSGD's first election and PowerSGD's warm-up (once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lsgd.planner.planning import Plan, Row, measure, plan


def __getattr__(name: str) -> Any:
    """``plan``, ``Plan``, ``Row``, ``measure``: imported on first use (they need torch,
    and the command line's parser imports this package without it)."""
    if name in ("plan", "Plan", "Row", "measure"):
        from lsgd.planner import planning

        return getattr(planning, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
