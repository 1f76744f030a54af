"""The sparse top-k wire format: bytes, kept positions, quantization, bit packing."""

from __future__ import annotations

import math

import pytest
import torch

from lsgd import names
from lsgd.comm.sparse import (
    VALUES,
    SparseFormat,
    as_rows,
    density_to_k,
    from_rows,
    index_bits,
    pack_bits,
    unpack_bits,
)

# (C, s, k) -> bytes per value format, by hand from the module's formulas:
# b = max(1, ceil(log2 s)), V = C k, I = ceil(V b / 8) (0 when k == s),
# float32 I + 4V, int8 I + V + 4C, 2bit I + ceil(2V / 8) + 8C.
BYTES = {
    (3, 10, 3): {"float32": 5 + 36, "int8": 5 + 9 + 12, "2bit": 5 + 3 + 24},  # b = 4
    (5, 64, 5): {"float32": 19 + 100, "int8": 19 + 25 + 20, "2bit": 19 + 7 + 40},  # b = 6
    (2, 100, 7): {"float32": 13 + 56, "int8": 13 + 14 + 8, "2bit": 13 + 4 + 16},  # b = 7
    (1, 65, 1): {"float32": 1 + 4, "int8": 1 + 1 + 4, "2bit": 1 + 1 + 8},  # b = 7
    (4, 6, 6): {"float32": 96, "int8": 24 + 16, "2bit": 6 + 32},  # k == s: no indices
    (3, 1, 1): {"float32": 12, "int8": 3 + 12, "2bit": 1 + 24},  # k == s == 1
    (0, 64, 5): {"float32": 0, "int8": 0, "2bit": 0},
}


def _rows(count: int, s: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(count, s, generator=torch.Generator().manual_seed(seed))


def _top_positions(rows: torch.Tensor, k: int) -> list[set[int]]:
    """Brute force: the positions of the k largest |x| of each row, by a full sort."""
    return [set(sorted(range(len(row)), key=lambda j: -abs(row[j]))[:k])
            for row in rows.tolist()]


def _kept_mask(rows: torch.Tensor, k: int) -> torch.Tensor:
    mask = torch.zeros_like(rows, dtype=torch.bool)
    for i, positions in enumerate(_top_positions(rows, k)):
        mask[i, sorted(positions)] = True
    return mask


def test_values_match_the_names_table():
    assert VALUES == names.SPARSE_VALUES == ("float32", "int8", "2bit")


@pytest.mark.parametrize("s, bits", [(1, 1), (2, 1), (3, 2), (10, 4), (64, 6), (65, 7),
                                     (100, 7), (4096, 12), (4097, 13)])
def test_index_bits(s, bits):
    assert index_bits(s) == bits == max(1, math.ceil(math.log2(s)))


@pytest.mark.parametrize("shape", list(BYTES))
@pytest.mark.parametrize("values", VALUES)
def test_bytes_match_the_formulas(shape, values):
    count, s, k = shape
    fmt = SparseFormat(k, values)
    assert fmt.nbytes(count, s) == BYTES[shape][values]
    payload = fmt.encode(_rows(count, s))
    assert payload.dtype == torch.uint8 and payload.shape == (BYTES[shape][values],)
    assert fmt.decode(payload, count, s).shape == (count, s)


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("s, k", [(10, 3), (64, 1), (100, 7), (37, 36)])
def test_keeps_exactly_the_top_k(values, s, k):
    rows = _rows(6, s, seed=s + k)
    fmt = SparseFormat(k, values)
    payload = fmt.encode(rows)
    # The indices on the wire, read back: exactly the brute-force top k of each row.
    sent = unpack_bits(payload, 6 * k, index_bits(s)).view(6, k).tolist()
    assert [set(r) for r in sent] == _top_positions(rows, k)
    decoded = fmt.decode(payload, 6, s)
    assert (decoded[~_kept_mask(rows, k)] == 0).all()
    assert torch.equal(fmt.encode(rows), payload)  # deterministic


@pytest.mark.parametrize("s, k", [(10, 3), (100, 7), (16, 16)])
def test_float32_is_exact_on_kept_entries(s, k):
    rows = _rows(5, s, seed=1)
    decoded = SparseFormat(k, "float32").roundtrip(rows)
    mask = _kept_mask(rows, k)
    assert torch.equal(decoded[mask], rows[mask])
    assert torch.equal(decoded[~mask], torch.zeros(int((~mask).sum())))
    assert int((decoded != 0).sum()) == 5 * k


@pytest.mark.parametrize("s, k", [(10, 3), (100, 20), (50, 50)])
def test_int8_error_within_half_a_step(s, k):
    rows = _rows(8, s, seed=2) * torch.logspace(-3, 3, 8)[:, None]  # very different scales
    fmt = SparseFormat(k, "int8")
    payload = fmt.encode(rows)
    decoded = fmt.decode(payload, 8, s)
    mask = _kept_mask(rows, k)
    kept = torch.where(mask, rows, torch.zeros(()))
    scale = kept.abs().amax(dim=1) / 127
    # The scales travel last, as float32.
    assert torch.equal(payload[-32:].clone().view(torch.float32), scale)
    error = (decoded - kept).abs()
    assert (error <= scale[:, None] / 2 * (1 + 1e-5)).all()
    assert (decoded[~mask] == 0).all()
    assert error.max() > 0  # really quantized


def test_int8_by_hand():
    rows = torch.tensor([[1.27, -0.5, 0.0, 0.004], [0.0, 0.0, 0.0, 0.0]])
    decoded = SparseFormat(3, "int8").roundtrip(rows)
    # a = 0.01: 1.27 -> 127, -0.5 -> -50, the third largest is 0.004 -> round(0.4) = 0.
    expected = torch.tensor([[1.27, -0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(decoded, expected, rtol=0, atol=1e-6)


def test_2bit_by_hand():
    rows = torch.tensor([[4.0, -1.0, 2.0, 0.5, 0.1]])
    fmt = SparseFormat(4, "2bit")
    payload = fmt.encode(rows)
    # Kept 4, -1, 2, 0.5: t = 1.875, hi = mean(4, 2) = 3, lo = mean(1, 0.5) = 0.75.
    assert payload[-8:].clone().view(torch.float32).tolist() == [0.75, 3.0]
    assert fmt.decode(payload, 1, 5).tolist() == [[3.0, -0.75, 3.0, 0.75, 0.0]]


@pytest.mark.parametrize("s, k", [(10, 4), (100, 30), (64, 64), (8, 1)])
def test_2bit_keeps_bin_sums_and_signs(s, k):
    rows = _rows(7, s, seed=3) * torch.logspace(-2, 2, 7)[:, None]
    decoded = SparseFormat(k, "2bit").roundtrip(rows)
    mask = _kept_mask(rows, k)
    assert (decoded[~mask] == 0).all()
    for row, out, kept in zip(rows, decoded, mask):
        values, got = row[kept].double(), out[kept].double()
        assert torch.equal(torch.sign(got), torch.sign(values))
        high = values.abs() > values.abs().mean()
        for in_bin in (high, ~high):
            truth = values[in_bin].abs().sum()
            assert got[in_bin].abs().sum().item() == pytest.approx(truth.item(), rel=1e-5)
            assert got[in_bin].abs().unique().numel() <= 1  # one level per bin


@pytest.mark.parametrize("bits", [1, 2, 3, 7, 12, 16])
@pytest.mark.parametrize("count", [0, 1, 13, 100])
def test_pack_unpack_bits(bits, count):
    generator = torch.Generator().manual_seed(bits * 1000 + count)
    codes = torch.randint(0, 2 ** bits, (count,), generator=generator)
    data = pack_bits(codes, bits)
    assert data.dtype == torch.uint8 and data.numel() == math.ceil(count * bits / 8)
    assert torch.equal(unpack_bits(data, count, bits), codes)
    # Trailing bytes (the next part of a payload) are ignored.
    extended = torch.cat([data, torch.full((3,), 255, dtype=torch.uint8)])
    assert torch.equal(unpack_bits(extended, count, bits), codes)


def test_pack_bits_is_lsb_first():
    assert pack_bits(torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1]), 1).tolist() == [0b1101, 1]
    assert pack_bits(torch.tensor([3, 1, 2]), 2).tolist() == [3 | 1 << 2 | 2 << 4]
    # Two 12-bit codes are the little-endian bytes of 0x123ABC.
    assert pack_bits(torch.tensor([0xABC, 0x123]), 12).tolist() == [0xBC, 0x3A, 0x12]
    with pytest.raises(ValueError):
        unpack_bits(torch.zeros(2, dtype=torch.uint8), 3, 7)  # needs 3 bytes


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_non_finite_rows_stay_non_finite(values, k):
    rows = _rows(5, 8, seed=4)
    rows[0, 5] = float("nan")
    rows[1, 2] = float("inf")
    rows[2, 7] = -float("inf")
    rows[3, 0], rows[3, 1] = float("nan"), float("inf")
    decoded = SparseFormat(k, values).roundtrip(rows)
    assert decoded.isfinite().all(dim=1).tolist() == [False, False, False, False, True]


def test_as_rows_and_from_rows():
    flat = torch.arange(10, dtype=torch.float32)
    rows = as_rows(flat, 4)
    assert rows.shape == (3, 4) and rows.dtype == torch.float32
    assert rows[2].tolist() == [8.0, 9.0, 0.0, 0.0]
    rows[0, 0] = 100.0  # a new tensor: the input is untouched
    assert flat[0] == 0
    assert torch.equal(from_rows(as_rows(flat, 4), 10), flat)
    assert as_rows(flat, 5).shape == (2, 5) and as_rows(flat, 1).shape == (10, 1)
    assert as_rows(torch.zeros(0), 4).shape == (0, 4)
    with pytest.raises(ValueError):
        from_rows(rows, 13)


@pytest.mark.parametrize("density, s, k", [(0.02, 64, 1), (0.02, 4096, 82), (1.0, 7, 7),
                                           (0.5, 5, 2), (0.5, 7, 4), (1e-9, 64, 1),
                                           (0.1, 100, 10)])
def test_density_to_k(density, s, k):
    assert density_to_k(density, s) == k


@pytest.mark.parametrize("density", [0.0, -0.1, 1.5, float("nan")])
def test_density_to_k_refuses(density):
    with pytest.raises(ValueError):
        density_to_k(density, 64)


def test_bad_formats_and_payloads():
    for k, values in [(0, "int8"), (2, "fp16"), (1.5, "int8"), (True, "int8")]:
        with pytest.raises(ValueError):
            SparseFormat(k, values)
    fmt = SparseFormat(5, "int8")
    with pytest.raises(ValueError):
        fmt.nbytes(2, 4)  # k > s
    with pytest.raises(ValueError):
        fmt.encode(torch.zeros(2, 4))
    with pytest.raises(ValueError):
        fmt.encode(torch.zeros(20))  # not rows
    with pytest.raises(ValueError):
        fmt.decode(torch.zeros(fmt.nbytes(2, 8) - 1, dtype=torch.uint8), 2, 8)
