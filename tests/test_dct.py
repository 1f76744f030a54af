"""DeMo's chunked DCT against the textbook DCT-II, and its inverse."""

from __future__ import annotations

import math

import pytest
import torch

from lsgd.dct import block_shape, dct_matrix, from_blocks, to_blocks


def _textbook(x: list[float]) -> list[float]:
    """X_k = sqrt(2/N) c_k sum_n x_n cos(pi (2n+1) k / (2N)), c_0 = 1/sqrt 2, else 1."""
    n_ = len(x)
    return [math.sqrt(2 / n_) * (1 / math.sqrt(2) if k == 0 else 1.0)
            * sum(x[n] * math.cos(math.pi * (2 * n + 1) * k / (2 * n_)) for n in range(n_))
            for k in range(n_)]


def _textbook_2d(block: list[list[float]]) -> list[float]:
    """The 2-D DCT-II of a block (along rows, then columns), row-major."""
    along_rows = [_textbook(row) for row in block]
    columns = [_textbook([row[j] for row in along_rows]) for j in range(len(block[0]))]
    return [columns[j][i] for i in range(len(block)) for j in range(len(block[0]))]


def _random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_matrix_is_the_textbook_dct():
    for n in (1, 5, 8):
        basis = dct_matrix(n, torch.float64)
        # Column j of D is the DCT of the unit vector e_j.
        for j in range(n):
            unit = [1.0 if i == j else 0.0 for i in range(n)]
            assert basis[:, j].tolist() == pytest.approx(_textbook(unit), abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_matrix_is_orthonormal(n):
    basis = dct_matrix(n)
    assert basis.dtype == torch.float32
    assert torch.allclose(basis @ basis.T, torch.eye(n), atol=1e-6)
    assert dct_matrix(n) is basis  # cached


def test_chunks_against_the_textbook():
    x = [3.0, -1.0, 4.0, 1.0, -5.0, 9.0, 2.0, 6.0]
    rows = to_blocks(torch.tensor(x), target=8)
    assert rows.shape == (1, 8)
    assert rows[0].tolist() == pytest.approx(_textbook(x), abs=1e-5)
    # target 4 on 6 values: chunks of 3 (the largest divisor of 6 that is at most 4).
    rows = to_blocks(torch.tensor(x[:6]), target=4)
    assert rows.shape == (2, 3)
    assert rows.tolist() == [pytest.approx(_textbook(x[:3]), abs=1e-5),
                             pytest.approx(_textbook(x[3:6]), abs=1e-5)]


def test_blocks_against_the_textbook():
    x = _random(8, 6, seed=1)
    rows = to_blocks(x, target=4)  # blocks of 4 x 3: a grid of 2 x 2
    assert rows.shape == (4, 12)
    for b, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        block = x[4 * i:4 * i + 4, 3 * j:3 * j + 3].tolist()
        assert rows[b].tolist() == pytest.approx(_textbook_2d(block), abs=1e-5)


@pytest.mark.parametrize("shape, block", [((7,), (7,)), ((64,), (64,)), ((128,), (64,)),
                                          ((100,), (50,)), ((97,), (1,)),
                                          ((96, 40), (48, 40)), ((3, 5, 4), (3, 20)),
                                          ((), (1,)), ((65, 128), (13, 64))])
def test_block_shape(shape, block):
    assert block_shape(torch.Size(shape), 64) == block


@pytest.mark.parametrize("shape, rows", [((7,), (1, 7)), ((64,), (1, 64)), ((128,), (2, 64)),
                                         ((96, 40), (2, 1920)), ((3, 5, 4), (1, 60)),
                                         ((), (1, 1)), ((0,), (0, 1))])
def test_inverse_recovers_the_tensor(shape, rows):
    x = _random(*shape, seed=2) if shape else torch.tensor(1.5)
    coefficients = to_blocks(x, 64)
    assert coefficients.shape == rows
    back = from_blocks(coefficients, x.shape, 64)
    assert back.shape == x.shape
    assert torch.allclose(back, x, rtol=0, atol=1e-5)
    # Orthonormal: the sum of squares is kept.
    assert coefficients.square().sum().item() == pytest.approx(x.square().sum().item(),
                                                               rel=1e-5, abs=1e-6)


def test_constant_blocks_have_only_a_dc_term():
    values = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -7.0]])
    x = values.repeat_interleave(4, dim=0).repeat_interleave(4, dim=1)  # 8 x 12, 4 x 4 blocks
    rows = to_blocks(x, target=4)
    assert rows.shape == (6, 16)
    # DC of an orthonormal 2-D DCT: sqrt(c1 c2) times the constant.
    assert torch.allclose(rows[:, 0], 4 * values.reshape(-1), atol=1e-5)
    assert rows[:, 1:].abs().max() < 1e-5
    chunks = to_blocks(torch.tensor([2.0] * 5 + [-1.0] * 5), target=5)
    assert torch.allclose(chunks[:, 0], torch.tensor([2.0, -1.0]) * math.sqrt(5), atol=1e-5)
    assert chunks[:, 1:].abs().max() < 1e-5


def test_bad_arguments():
    with pytest.raises(ValueError):
        from_blocks(torch.zeros(2, 32), torch.Size([128]), 64)  # rows of another shape
    with pytest.raises(ValueError):
        block_shape(torch.Size([10]), 0)
    with pytest.raises(ValueError):
        dct_matrix(0)
