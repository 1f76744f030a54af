"""``lsgd plan`` and ``lsgd.plan(...)`` (lsgd.planner.planning): which method, how often,
and what it costs on a link, before training.

The model is the simulator's clock (lsgd.comm.world) on its link model (LinkModel: a
link per node, free inside one), replayed for one worker of a symmetric run. Every step
costs the compute; ``allreduce`` all-reduces the gradients every step (``-bf16``: in
bfloat16; ``-powersgd``: torch's three all-reduces); ``diloco``, ``sparseloco`` and
``muloco`` send the state every ``H`` steps, or one of ``F`` fragments every ``H/F``
(``-streaming``), all-reduced in its codec or all-gathered (top-k, 2-bit), blocking or
behind ``K`` steps (``-hidden``) or the next period (``-eager``); ``demo`` all-gathers
the top DCT coefficients every step; ``lsgd`` gathers the scores (a step early on the
control lane when hidden), then broadcasts the leader's state along the chain of the
nodes every global period, landing ``K`` steps later when hidden. A transfer *waits*
for what is left of it when it lands and *hides* the rest behind compute. Left out:
``--replica node`` (the simulator charges each of a node's P peer collectives the
whole link, where they share it), BatchNorm statistics, LSGD's first election.
"""
