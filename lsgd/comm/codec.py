"""Wire formats for compressed transfers: a flat float32 tensor as bytes (``uint8``) and back.

* ``"bf16"``: each value rounded to bfloat16, 2 bytes per value (0.50 of float32).
* ``"int8"``: blocks of :data:`BLOCK` (256) values, each with one float32 scale
  ``s = max |x| / 127`` and its values as ``round(x / s)`` in ``[-127, 127]``:
  ``n + 4 ceil(n / 256)`` bytes (0.254 of float32), error at most ``s / 2``.

A non-finite value makes its whole block decode non-finite, so a diverged worker stays
visibly diverged. Both backends' compressed all-reduce is built from :func:`chunks`,
:func:`encode` and :func:`reduce_encoded`, so gloo and the simulator compute the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from lsgd.names import CODECS

BLOCK = 256  # values per int8 block; chunks of an all-reduce start at block boundaries


def check(name: str) -> str:
    """``name`` if it is a codec (see :data:`CODECS`); ``ValueError`` otherwise."""
    if name not in CODECS:
        raise ValueError(f"compress must be one of {', '.join(CODECS)}, got {name!r}")
    return name


def nbytes(codec: str, numel: int) -> int:
    """Bytes on the wire for ``numel`` float32 values under ``codec``."""
    if codec == "bf16":
        return 2 * numel
    if codec == "int8":
        return numel + 4 * math.ceil(numel / BLOCK)
    return 4 * numel


def encode(codec: str, values: torch.Tensor) -> torch.Tensor:
    """``values`` (flat float32) as the bytes ``codec`` sends (a new ``uint8`` tensor)."""
    values = values.reshape(-1)
    if codec == "bf16":
        return values.to(torch.bfloat16).view(torch.uint8)
    assert codec == "int8", codec
    n = values.numel()
    blocks = math.ceil(n / BLOCK)
    padded = F.pad(values.to(torch.float32), (0, blocks * BLOCK - n))
    steps, scale = quantize_int8(padded.view(blocks, BLOCK))
    return torch.cat([steps.view(-1)[:n].view(torch.uint8), scale.view(torch.uint8)])


def quantize_int8(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 steps, float32 scales) of the float32 ``[C, m]`` ``rows``: per row the scale
    ``a = max |x| / 127`` (0 for a row of zeros; NaN or inf when the row is not finite)
    and each value as ``round(x / a)`` in ``[-127, 127]``."""
    scale = rows.abs().amax(dim=1) / 127.0
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    steps = torch.nan_to_num(torch.round(rows / divisor[:, None]), nan=0.0, posinf=0.0,
                             neginf=0.0).clamp_(-127, 127)
    return steps.to(torch.int8), scale


def decode(codec: str, data: torch.Tensor, numel: int) -> torch.Tensor:
    """The float32 values that ``data`` (from :func:`encode`) stands for (a new tensor)."""
    if codec == "bf16":
        return as_values(data[:2 * numel], torch.bfloat16).to(torch.float32)
    assert codec == "int8", codec
    blocks = math.ceil(numel / BLOCK)
    quantized = data[:numel].view(torch.int8).to(torch.float32)
    scale = as_values(data[numel:numel + 4 * blocks])
    padded = F.pad(quantized, (0, blocks * BLOCK - numel))
    # 0 * inf and 0 * NaN are NaN: a non-finite block stays non-finite throughout.
    return (padded.view(blocks, BLOCK) * scale[:, None]).view(-1)[:numel]


def as_values(data: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Bytes as values of ``dtype``. Copies, so that a part cut from a larger buffer at any
    offset can be viewed as wider values (a view needs an offset aligned to their size)."""
    return data.clone().view(dtype)


def roundtrip(codec: str, values: torch.Tensor) -> torch.Tensor:
    """What ``values`` become after a trip over the wire (a new tensor)."""
    return decode(codec, encode(codec, values), values.numel())


def chunks(codec: str, numel: int, n: int) -> list[tuple[int, int]]:
    """One contiguous ``(start, end)`` part of ``numel`` values per member of an all-reduce, as
    equal as whole int8 blocks allow: encoding the parts one by one equals encoding the whole."""
    return split(numel, n, BLOCK if codec == "int8" else 1)


def split(numel: int, n: int, unit: int = 1) -> list[tuple[int, int]]:
    """``n`` contiguous ``(start, end)`` parts of ``numel`` values, as equal as whole
    units of ``unit`` values allow."""
    units = math.ceil(numel / unit)
    bounds = [min(numel, unit * (units * i // n)) for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def reduce_encoded(codec: str, parts: Sequence[torch.Tensor], numel: int, mean: bool
                   ) -> torch.Tensor:
    """The owner's step of a compressed all-reduce: decode every member's encoded part (in
    rank order), add them in float32 (never in the low-precision format: nothing overflows
    or loses the small contributions), divide by their number for a mean, encode."""
    total = decode(codec, parts[0], numel).clone()
    for part in parts[1:]:
        total.add_(decode(codec, part, numel))
    if mean:  # by a tensor: CUDA divides by a Python number as a product with its
        # reciprocal, which rounds differently from the CPU's (and the IEEE) quotient
        total.div_(torch.full((), float(len(parts)), device=total.device))
    return encode(codec, total)


def part_sizes(codec: str, numel: int, n: int) -> list[int]:
    """Encoded bytes of each member's part (:func:`chunks`) in a compressed all-reduce."""
    return [nbytes(codec, end - start) for start, end in chunks(codec, numel, n)]


