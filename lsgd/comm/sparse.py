"""A sparse, quantized wire format: the top ``k`` entries of every chunk of ``s`` values.

A message is a float32 tensor seen as ``C`` rows (chunks) of ``s`` values, ``[C, s]``
(:func:`as_rows` pads with zeros). A :class:`SparseFormat` keeps the ``k`` largest-magnitude entries
of each row, quantizes them and codes their positions. The payload is one ``uint8`` tensor whose
size depends only on ``C``, ``s`` and the format, so the workers' payloads can be all-gathered; each
is decoded on its own and the dense results summed.

* Selection: ``torch.topk(rows.abs(), k, dim=1)``; with ``k == s`` every entry is kept
  in its order and no index is sent.
* Indices: ``b = max(1, ceil(log2 s))`` bits each, all ``C k`` of them (row by row, in
  ``topk`` order) one bit stream, LSB first (:func:`pack_bits`): ``ceil(C k b / 8)`` bytes.
* Values (:data:`VALUES`), with ``V = C k`` kept values: ``"float32"`` as they are,
  ``4 V`` bytes; ``"int8"`` one float32 scale per row
  (:func:`~lsgd.comm.codec.quantize_int8`), ``V + 4 C`` bytes; ``"2bit"`` a sign bit
  (1 for negative) and a magnitude bit per value, ``sign | magnitude << 1`` packed 4 to
  a byte, the magnitude bit ``|v| > mean |kept|`` of the row, which carries two float32
  levels ``lo`` and ``hi``: the means of ``|v|`` over the values with bit 0 and with bit 1
  (0 for an empty bin; bin means give the smallest squared error for this split), a
  value decoding to ``±lo`` or ``±hi``: ``ceil(2 V / 8) + 8 C`` bytes.
* Layout: ``[indices][values][scales or levels]``; float32 parts are their bytes in the
  machine's byte order.

A row holding NaN or ±inf decodes to a row that is not finite, so a diverged worker
stays visibly diverged: ``topk`` ranks NaN and inf first, and the int8 scale (a max) or
the 2-bit ``lo`` level (a mean no finite value can exceed) carries it to the whole row.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from lsgd.comm.codec import as_values, quantize_int8
from lsgd.names import SPARSE_VALUES

VALUES = SPARSE_VALUES  # the value formats, in the order the command line offers them
_MAX_BITS = 63  # codes are non-negative int64


def index_bits(s: int) -> int:
    """Bits of one index within a row of ``s`` values: ``max(1, ceil(log2 s))``."""
    # (s - 1).bit_length() is ceil(log2 s) for s >= 1, with no floating point.
    return max(1, (s - 1).bit_length())


def _check_bits(bits: int) -> None:
    if not 1 <= bits <= _MAX_BITS:
        raise ValueError(f"bits must be in [1, {_MAX_BITS}], got {bits}")


def pack_bits(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """``codes`` (integers in ``[0, 2**bits)``, any shape, read flat) as one bit stream:
    code ``i`` holds stream bits ``[i bits, (i + 1) bits)``, least significant first,
    and stream bit ``j`` is bit ``j % 8`` of byte ``j // 8``; the last byte is padded
    with zeros. Returns ``ceil(n bits / 8)`` bytes (a new ``uint8`` tensor). Bits above
    ``bits`` are dropped (not checked: checking would wait for the device)."""
    _check_bits(bits)
    codes = codes.reshape(-1).to(torch.int64)
    count = codes.numel()
    size = (count * bits + 7) // 8
    device = codes.device
    shifts = torch.arange(bits, dtype=torch.int64, device=device)
    stream = torch.zeros(size * 8, dtype=torch.uint8, device=device)
    stream[:count * bits] = ((codes[:, None] >> shifts) & 1).view(-1)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=device)
    # Distinct powers of two add up to at most 255: the uint8 sum is an exact OR.
    return (stream.view(size, 8) * weights).sum(dim=1, dtype=torch.uint8)


def unpack_bits(data: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """The ``count`` codes of ``bits`` bits each that :func:`pack_bits` wrote at the start
    of ``data`` (``uint8``), as a new ``int64`` tensor; later bytes are ignored."""
    _check_bits(bits)
    size = (count * bits + 7) // 8
    if data.numel() < size:
        raise ValueError(f"{count} codes of {bits} bits need {size} bytes, got {data.numel()}")
    device = data.device
    shifts8 = torch.arange(8, dtype=torch.uint8, device=device)
    stream = ((data.reshape(-1)[:size, None] >> shifts8) & 1).view(-1)[:count * bits]
    shifts = torch.arange(bits, dtype=torch.int64, device=device)
    return (stream.view(count, bits).to(torch.int64) << shifts).sum(dim=1)


@dataclasses.dataclass(frozen=True)
class SparseFormat:
    """The top ``k`` entries of each row of ``s`` (``1 <= k <= s``, checked wherever ``s``
    is known), their values as ``values`` (:data:`VALUES`); the bytes: module docstring."""

    k: int
    values: str

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a positive int, got {self.k!r}")
        if self.values not in VALUES:
            raise ValueError(f"values must be one of {', '.join(VALUES)}, got {self.values!r}")

    def _check(self, rows: int, s: int) -> None:
        if rows < 0 or s < 1:
            raise ValueError(f"need rows >= 0 and s >= 1, got rows={rows}, s={s}")
        if self.k > s:
            raise ValueError(f"k must be at most s: k={self.k}, s={s}")

    def _parts(self, rows: int, s: int) -> tuple[int, int, int]:
        """Bytes of (indices, values, scales or levels) for ``rows`` rows of ``s``."""
        self._check(rows, s)
        kept = rows * self.k
        indices = 0 if self.k == s else (kept * index_bits(s) + 7) // 8
        if self.values == "float32":
            return indices, 4 * kept, 0
        if self.values == "int8":
            return indices, kept, 4 * rows
        return indices, (kept * 2 + 7) // 8, 8 * rows

    def nbytes(self, rows: int, s: int) -> int:
        """Payload bytes for ``rows`` rows of ``s`` values (see the module docstring)."""
        return sum(self._parts(rows, s))

    def encode(self, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` (``[C, s]``, converted to float32) as a new ``uint8`` payload of
        :meth:`nbytes` ``(C, s)`` bytes: ``[indices][values][scales or levels]``."""
        if rows.dim() != 2:
            raise ValueError(f"rows must be 2-D [C, s], got shape {tuple(rows.shape)}")
        count, s = rows.shape
        self._check(count, s)
        rows = rows.to(torch.float32)
        if self.k == s:
            kept = rows.contiguous()
            index_bytes = torch.empty(0, dtype=torch.uint8, device=rows.device)
        else:
            # NaN ranks above inf, inf above every finite value: a non-finite entry
            # is always kept, and the value format spreads it over its row.
            index = torch.topk(rows.abs(), self.k, dim=1).indices
            kept = rows.gather(1, index)
            index_bytes = pack_bits(index, index_bits(s))
        if self.values == "float32":
            parts = [kept.reshape(-1).view(torch.uint8)]
        elif self.values == "int8":
            steps, scale = quantize_int8(kept)
            parts = [steps.view(-1).view(torch.uint8), scale.view(torch.uint8)]
        else:
            parts = _encode_2bit(kept)
        return torch.cat([index_bytes, *parts])

    def decode(self, payload: torch.Tensor, rows: int, s: int) -> torch.Tensor:
        """The dense float32 ``[rows, s]`` that ``payload`` (one worker's, from
        :meth:`encode`) stands for, zeros where nothing was kept (a new tensor)."""
        index_size, value_size, scale_size = self._parts(rows, s)
        if payload.dtype != torch.uint8 or payload.numel() != index_size + value_size + scale_size:
            raise ValueError(f"payload must be {index_size + value_size + scale_size} uint8 "
                             f"bytes, got {payload.numel()} {payload.dtype}")
        payload = payload.reshape(-1)
        k = self.k
        value_bytes = payload[index_size:index_size + value_size]
        scale_bytes = payload[index_size + value_size:]
        if self.values == "float32":
            kept = as_values(value_bytes).view(rows, k)
        elif self.values == "int8":  # a non-finite scale spreads over its row (0 * inf is NaN)
            kept = (value_bytes.view(torch.int8).to(torch.float32).view(rows, k)
                    * as_values(scale_bytes)[:, None])
        else:
            kept = _decode_2bit(value_bytes, scale_bytes, rows, k)
        if k == s:
            return kept
        index = unpack_bits(payload[:index_size], rows * k, index_bits(s)).view(rows, k)
        dense = torch.zeros(rows, s, dtype=torch.float32, device=payload.device)
        return dense.scatter_(1, index, kept)

    def roundtrip(self, rows: torch.Tensor) -> torch.Tensor:
        """What ``rows`` (``[C, s]``) become after a trip over the wire (a new tensor)."""
        return self.decode(self.encode(rows), rows.shape[0], rows.shape[1])


def _encode_2bit(kept: torch.Tensor) -> list[torch.Tensor]:
    """Bytes of the 2-bit codes and the float32 ``(lo, hi)`` levels of ``kept``."""
    magnitude = kept.abs()
    high = magnitude > magnitude.mean(dim=1, keepdim=True)  # all False when t is NaN or inf
    zero = torch.zeros((), dtype=magnitude.dtype, device=magnitude.device)
    # where, not a product with the bit: an inf (always in the low bin) times 0 would
    # make the high level NaN rather than 0.
    high_sum = torch.where(high, magnitude, zero).sum(dim=1)
    low_sum = torch.where(high, zero, magnitude).sum(dim=1)
    high_count = high.sum(dim=1)
    low_count = kept.shape[1] - high_count
    # An empty bin's level is 0 (its sum is 0; the count is clamped to avoid 0 / 0).
    levels = torch.stack([low_sum / low_count.clamp(min=1), high_sum / high_count.clamp(min=1)],
                         dim=1).to(torch.float32)
    codes = (kept < 0).to(torch.int64) | (high.to(torch.int64) << 1)
    return [pack_bits(codes, 2), levels.reshape(-1).view(torch.uint8)]


def _decode_2bit(value_bytes: torch.Tensor, level_bytes: torch.Tensor, rows: int, k: int
                 ) -> torch.Tensor:
    codes = unpack_bits(value_bytes, rows * k, 2).view(rows, k)
    levels = as_values(level_bytes).view(rows, 2)
    magnitude = levels.gather(1, codes >> 1)
    return torch.where((codes & 1).bool(), -magnitude, magnitude)


def as_rows(flat: torch.Tensor, s: int) -> torch.Tensor:
    """``flat``'s ``n`` values as new float32 rows ``[ceil(n / s), s]``, the last zero-padded."""
    if s < 1:
        raise ValueError(f"s must be at least 1, got {s}")
    flat = flat.reshape(-1)
    count = math.ceil(flat.numel() / s)
    return F.pad(flat.to(torch.float32), (0, count * s - flat.numel())).view(count, s)


def from_rows(rows: torch.Tensor, numel: int) -> torch.Tensor:
    """The first ``numel`` values of ``rows`` (undoes :func:`as_rows`'s padding), 1-D;
    a view when ``rows`` is contiguous."""
    if not 0 <= numel <= rows.numel():
        raise ValueError(f"numel must be in [0, {rows.numel()}], got {numel}")
    return rows.reshape(-1)[:numel]


def density_to_k(density: float, s: int) -> int:
    """Entries kept per row of ``s`` for a fraction ``density`` in ``(0, 1]``:
    ``max(1, round(density s))`` (Python's ``round``: halves to even), at most ``s``."""
    if s < 1:
        raise ValueError(f"s must be at least 1, got {s}")
    if not 0 < density <= 1:  # also False for NaN
        raise ValueError(f"density must be in (0, 1], got {density}")
    return min(s, max(1, round(density * s)))
