"""The pure math against hand-computed values."""

from __future__ import annotations

import math

import torch

from lsgd.flat import FlatBuffer
from lsgd.functional import elastic_step_, elect, pull_, pull_two_, ring_allreduce_bytes


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_pull_moves_exactly_weight_of_the_way() -> None:
    x, y = t(0.0, 4.0), t(8.0)
    pull_([x, y], [t(2.0, 0.0), t(0.0)], 0.25)
    assert x.tolist() == [0.5, 3.0] and y.tolist() == [6.0]


def test_zero_pull_does_no_arithmetic() -> None:
    x = t(1.0, math.inf)
    pull_([x], [t(math.nan, 0.0)], 0.0)
    assert x.tolist() == [1.0, math.inf]


def test_pull_two_is_simultaneous() -> None:
    # x - a(x - p) - b(x - q) with x=10, p=0, q=20, a=0.1, b=0.2: 10 - 1 + 2 = 11
    x = t(10.0)
    pull_two_([x], [t(0.0)], 0.1, [t(20.0)], 0.2)
    assert x.item() == 11.0
    # two successive lerps would give 9 + 0.2 * 11 = 11.2 instead
    y = t(10.0)
    pull_([y], [t(0.0)], 0.1)
    pull_([y], [t(20.0)], 0.2)
    assert abs(y.item() - 11.2) < 1e-12


def test_elastic_step() -> None:
    # x=4, c=2, x_bar=3, alpha=0.25, beta=0.5: x -> 4 - 0.5 = 3.5; c -> 2 + 0.5 = 2.5
    x, c = t(4.0), t(2.0)
    elastic_step_([x], [c], [t(3.0)], alpha=0.25, beta=0.5)
    assert (x.item(), c.item()) == (3.5, 2.5)


def test_election() -> None:
    assert elect(t(3.0, 1.0, 2.0)) == 1
    assert elect(t(2.0, 1.0, 1.0)) == 1, "ties go to the lowest rank"
    assert elect(t(math.nan, 5.0, -math.inf, math.inf)) == 1, "non-finite scores never win"
    assert elect(t(math.nan, math.nan)) is None


def test_ring_allreduce_volume() -> None:
    assert ring_allreduce_bytes(400, 4) == 600
    assert ring_allreduce_bytes(400, 1) == 0


def test_flat_buffer_views_share_storage_and_group_dtypes() -> None:
    tensors = [torch.ones(2, 3), torch.zeros(4, dtype=torch.float64), torch.full((5,), 2.0)]
    flat = FlatBuffer(tensors).copy_from(tensors)
    assert [b.numel() for b in flat.buffers] == [11, 4]
    assert flat.nbytes == 11 * 4 + 4 * 8
    flat.buffers[0].mul_(3)
    assert flat.views[0].tolist() == [[3.0] * 3] * 2 and flat.views[2].tolist() == [6.0] * 5
    out = [torch.empty_like(x) for x in tensors]
    flat.copy_to(out)
    assert out[2].tolist() == [6.0] * 5 and out[1].tolist() == [0.0] * 4


def test_a_range_copy_moves_that_range_only() -> None:
    """FlatBuffer.copy_range_from/to: a contiguous tensor's values in the range; a
    non-contiguous one that meets it, whole."""
    tensors = [torch.arange(6.0).reshape(2, 3), torch.arange(6.0, 12.0).reshape(3, 2).t(),
               torch.arange(12.0, 16.0)]
    flat = FlatBuffer(tensors)
    flat.copy_range_from(tensors, [(4, 13)])
    expected = torch.zeros(16)
    expected[4:6] = torch.tensor([4.0, 5.0])
    expected[6:12] = tensors[1].reshape(-1)  # non-contiguous: whole
    expected[12] = 12.0
    assert torch.equal(flat.buffers[0], expected)
    flat.buffers[0].copy_(torch.arange(100.0, 116.0))
    flat.copy_range_to(tensors, [(1, 3)])
    assert tensors[0].reshape(-1).tolist() == [0.0, 101.0, 102.0, 3.0, 4.0, 5.0]
    assert tensors[1].t().reshape(-1).tolist() == [float(v) for v in range(6, 12)]
    flat.copy_range_to(tensors, [(7, 8)])
    assert tensors[1].reshape(-1).tolist() == [float(v) for v in range(106, 112)]
    assert tensors[2].tolist() == [12.0, 13.0, 14.0, 15.0]
