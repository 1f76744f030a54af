"""Expected goodput under faults (``lsgd plan --mtbf``): the share of an unfailed run's
useful steps per second kept with a fault every ``mtbf`` seconds of training on average,
``1 / (1 + lost / mtbf)``, ``lost`` the seconds a fault costs as ``lsgd bench chaos``
measured it on 4 shaped 100 Mbit/s nodes (records/chaos-goodput; against the median wall
time of its fault-free runs): :data:`LOST`, and in a
restartable run also, after each fatal fault (:data:`FATAL` of them), half a checkpoint
interval of steps redone on average (elastic runs redo none).
"""

from __future__ import annotations

#: Seconds a fault costs beyond the steps it makes the run redo, by mode.
LOST = {"restart": 5.0, "elastic": 0.3}
#: The share of the drawn faults that end a process (kill, segv, kill-node, a corrupt
#: checkpoint found at the restart).
FATAL = 0.71
MODES = tuple(LOST)


def lost_per_fault(mode: str, step_seconds: float, checkpoint_every: int) -> float:
    """The seconds one fault costs a run of ``mode`` on average."""
    redo = FATAL * checkpoint_every / 2 * step_seconds if mode == "restart" else 0.0
    return LOST[mode] + redo


def goodput(mode: str, mtbf: float, step_seconds: float, checkpoint_every: int = 50) -> float:
    """The share of useful steps per second kept with a fault every ``mtbf`` seconds."""
    return 1.0 / (1.0 + lost_per_fault(mode, step_seconds, checkpoint_every) / mtbf)
