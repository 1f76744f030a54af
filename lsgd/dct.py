"""DeMo's chunked DCT: a tensor as the orthonormal DCT-II coefficients of its chunks.

DeMo (arXiv 2411.19870; reference code bloc97/DeMo) sends the largest DCT coefficients
of each chunk of a momentum. A 1-D tensor is cut into chunks of ``c`` values, a 2-D one
(more dimensions flattened) into blocks ``c1 x c2``, each size the largest divisor of
its dimension at most ``target``; each gets a DCT-II, its coefficients a row of ``[C,
s]`` (blocks row-major). The basis is orthonormal: the inverse DCT is its transpose.
"""

from __future__ import annotations

import functools
import math

import torch

DEFAULT_TARGET = 64  # DeMo's default chunk size


@functools.lru_cache(maxsize=64)
def _dct_matrix(n: int, dtype: torch.dtype, device: torch.device | None) -> torch.Tensor:
    k = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(n, dtype=torch.float64)[None, :]
    basis = torch.cos(math.pi * (2 * j + 1) * k / (2 * n)) * math.sqrt(2 / n)
    basis[0] /= math.sqrt(2)
    # Built in float64 and rounded once, so every dtype gets its nearest basis.
    return basis.to(dtype=dtype, device=device)


def dct_matrix(n: int, dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> torch.Tensor:
    """The orthonormal DCT-II matrix ``D`` of size ``n``: ``D[k, j] = sqrt(2 / n) c_k
    cos(pi (2 j + 1) k / (2 n))``, ``c_0 = 1 / sqrt 2``, else 1. Cached per ``(n,
    dtype, device)``: shared, so never modify it in place."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return _dct_matrix(n, dtype, None if device is None else torch.device(device))


@functools.lru_cache(maxsize=1024)
def _largest_divisor(n: int, target: int) -> int:
    """The largest divisor of ``n`` that is at most ``target`` (1 for ``n == 0``: an
    empty dimension has no chunks, and any size will do)."""
    return next((d for d in range(min(n, target), 0, -1) if n % d == 0), 1)


def _as_2d(shape: torch.Size) -> tuple[int, ...]:
    """``shape`` as the transform sees it: ``(n,)`` (a 0-d tensor: ``(1,)``) or ``(n1, n2)``."""
    return (math.prod(shape),) if len(shape) < 2 else (shape[0], math.prod(shape[1:]))


def block_shape(shape: torch.Size, target: int = DEFAULT_TARGET) -> tuple[int, ...]:
    """The chunk ``(c,)`` or block ``(c1, c2)`` of a tensor of ``shape``: per dimension of
    its 1-D or 2-D view, the largest divisor at most ``target``."""
    if target < 1:
        raise ValueError(f"target must be at least 1, got {target}")
    return tuple(_largest_divisor(n, target) for n in _as_2d(torch.Size(shape)))


def to_blocks(tensor: torch.Tensor, target: int = DEFAULT_TARGET) -> torch.Tensor:
    """The DCT-II coefficients of ``tensor`` as rows ``[C, s]``, one per chunk or block,
    in the tensor's (floating) dtype."""
    view = _as_2d(tensor.shape)
    block = block_shape(tensor.shape, target)
    dtype, device = tensor.dtype, tensor.device
    if len(view) == 1:  # row by row, X = D x is x^T D^T
        return tensor.reshape(-1, block[0]) @ dct_matrix(block[0], dtype, device).T
    (n1, n2), (c1, c2) = view, block
    blocks = tensor.reshape(n1 // c1, c1, n2 // c2, c2).permute(0, 2, 1, 3)  # [B1, B2, c1, c2]
    d1, d2 = dct_matrix(c1, dtype, device), dct_matrix(c2, dtype, device)
    coefficients = d1 @ blocks @ d2.T  # the 2-D DCT of each block: D1 X D2^T
    return coefficients.reshape(-1, c1 * c2)


def from_blocks(rows: torch.Tensor, shape: torch.Size, target: int = DEFAULT_TARGET
                ) -> torch.Tensor:
    """The tensor of ``shape`` whose :func:`to_blocks` is ``rows`` (the inverse DCT)."""
    shape = torch.Size(shape)
    view = _as_2d(shape)
    block = block_shape(shape, target)
    expected = (math.prod(view) // math.prod(block), math.prod(block))
    if tuple(rows.shape) != expected:
        raise ValueError(f"rows for shape {tuple(shape)} (target {target}) must be "
                         f"{list(expected)}, got {list(rows.shape)}")
    dtype, device = rows.dtype, rows.device
    if len(view) == 1:  # x^T = X^T D
        return (rows @ dct_matrix(block[0], dtype, device)).reshape(shape)
    (n1, n2), (c1, c2) = view, block
    coefficients = rows.reshape(n1 // c1, n2 // c2, c1, c2)
    d1, d2 = dct_matrix(c1, dtype, device), dct_matrix(c2, dtype, device)
    blocks = d1.T @ coefficients @ d2  # X = D1^T Y D2
    return blocks.permute(0, 2, 1, 3).reshape(shape)
