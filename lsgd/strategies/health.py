"""Workers that cannot go on together: diverged ones, and ones with another model."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import torch

from lsgd.comm import Communicator
from lsgd.comm.communicator import Among


class DivergedError(RuntimeError):
    """Every worker's state (or loss) is NaN or infinite: training cannot go on. Raised on
    every worker at the same round, decided from the same numbers, so none is left
    waiting in a collective."""


def _count(n: int) -> str:
    """``n`` for a message: exact below ten thousand, else ``35.2k`` or ``1.2M``."""
    if n < 10_000:
        return str(n)
    return f"{n / 1e3:.1f}k" if n < 1_000_000 else f"{n / 1e6:.1f}M"


def check_same_model(comm: Communicator, state: Sequence[torch.Tensor], owner: str,
                     device: torch.device) -> None:
    """Raise ``ValueError`` on every worker unless all states have the same layout.

    Each worker's fingerprint is a CRC-32 of its tensors' ``(shape, dtype)`` (unlike
    Python's salted ``hash``), its number of tensors and of values: one all-gather of
    three int64 (``"init"`` traffic), before the initial broadcast would fail or hang.
    """
    if comm.world_size == 1:
        return
    layout = repr([(tuple(t.shape), str(t.dtype)) for t in state])
    mine = torch.tensor([zlib.crc32(layout.encode()), len(state), sum(t.numel() for t in state)],
                        dtype=torch.int64, device=device)
    with comm.category("init"):
        table = comm.all_gather(mine).cpu().tolist()
    differ = [r for r, row in enumerate(table) if row[0] != table[0][0]]
    if not differ:
        return
    _, tensors0, values0 = table[0]
    each = "; ".join(
        f"worker {r}'s model differs from worker 0's: {table[r][1]} tensors / "
        f"{_count(table[r][2])} values vs {tensors0} / {_count(values0)}" for r in differ)
    raise ValueError(f"{owner}: {each} (seen from worker {comm.rank}); every worker must "
                     "build the same model (same layers, shapes and dtypes, and the same "
                     "bn_buffers)")


def sum_healthy_(comm: Communicator, tensors: Sequence[torch.Tensor], healthy: bool,
                 among: Among, device: torch.device) -> int:
    """``tensors <-`` their sum over the *healthy* members of ``among`` (one all-reduce per
    tensor, a member that is not ``healthy`` adding zeros); returns the number of healthy
    members (one more all-reduce of one float64, ``"control"`` traffic)."""
    if not healthy:
        for tensor in tensors:
            tensor.zero_()
    for tensor in tensors:
        comm.all_reduce_(tensor, op="sum", among=among)
    count = torch.tensor([1.0 if healthy else 0.0], dtype=torch.float64, device=device)
    with comm.category("control"):
        comm.all_reduce_(count, op="sum", among=among)
    return int(count.item())
