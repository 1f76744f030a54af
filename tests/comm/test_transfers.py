"""Non-blocking and compressed collectives: the codecs, the compressed all-reduce against a
reference, the simulator's clock, and gloo processes against the simulator bit for bit."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest
import torch

import lsgd
from lsgd.comm import codec
from tests.comm.byte_counts import all_reduce_bytes
from lsgd.comm.simulator import SimulationError

W = 4
CNN7 = 348_746  # values in CNN7's state


def test_int8_rounds_each_value_to_half_a_step_of_its_block() -> None:
    torch.manual_seed(0)
    x = torch.randn(1000) * torch.logspace(-3, 3, 1000)  # blocks of very different scales
    y = codec.roundtrip("int8", x)
    for start in range(0, 1000, codec.BLOCK):
        block = x[start:start + codec.BLOCK]
        step = block.abs().max() / 127
        assert (y[start:start + codec.BLOCK] - block).abs().max() <= step / 2 * (1 + 1e-6)
    assert codec.nbytes("int8", 1000) == 1000 + 4 * 4 == codec.encode("int8", x).numel()


def test_bf16_keeps_eight_bits_of_mantissa() -> None:
    x = torch.randn(1000)
    y = codec.roundtrip("bf16", x)
    assert ((y - x).abs() <= x.abs() * 2.0**-8).all()
    assert codec.encode("bf16", x).numel() == codec.nbytes("bf16", 1000) == 2000


@pytest.mark.parametrize("name", ["bf16", "int8"])
def test_a_value_that_is_not_finite_stays_not_finite(name: str) -> None:
    x = torch.ones(600)
    x[3], x[300] = math.nan, math.inf
    y = codec.roundtrip(name, x)
    assert not torch.isfinite(y[3]) and not torch.isfinite(y[300])
    if name == "int8":  # a block with one bad value is all bad; the others are intact
        assert not torch.isfinite(y[:512]).any() and torch.isfinite(y[512:]).all()


def test_parts_start_at_block_boundaries() -> None:
    parts = codec.chunks("int8", CNN7, W)
    assert parts[0][0] == 0 and parts[-1][1] == CNN7
    assert all(a[1] == b[0] and a[1] % codec.BLOCK == 0 for a, b in zip(parts, parts[1:]))
    assert codec.chunks("bf16", 10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]


def _reduce(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    comm = lsgd.get_communicator()
    g = torch.Generator().manual_seed(info.rank)
    x = torch.randn(spec["n"], generator=g) * (info.rank + 1)
    out: dict[str, Any] = {"x": x.clone()}
    for name, call in (("int8", lambda t: comm.all_reduce_(t, "mean", codec="int8")),
                       ("bf16", lambda t: comm.start_all_reduce(t, "sum", codec="bf16").wait()),
                       ("broadcast", lambda t: comm.start_broadcast(t, 2, codec="int8").wait()),
                       ("group", lambda t: comm.all_reduce_(t, "mean", "group", codec="int8"))):
        before = comm.stats()
        y = x.clone()
        call(y)
        out[name] = y
        out[name + "_sent"] = comm.stats().bytes_sent - before.bytes_sent
    out["gather"] = comm.start_all_gather(torch.tensor([float(info.rank)])).wait()
    out["digest"] = hashlib.sha256(b"".join(
        out[k].numpy().tobytes() for k in ("int8", "bf16", "broadcast", "group"))).hexdigest()
    return out


def test_the_compressed_all_reduce_is_its_reference_on_every_member() -> None:
    """Each part's owner decodes the members' encodings, adds them in float32 (rank
    order), divides, encodes; every member decodes the same bytes."""
    n = 1000
    results = lsgd.simulate(_reduce, W, args=({"n": n},))
    xs = [r["x"] for r in results]
    expected = torch.empty(n)
    for begin, end in codec.chunks("int8", n, W):
        parts = [codec.encode("int8", x[begin:end]) for x in xs]
        expected[begin:end] = codec.decode(
            "int8", codec.reduce_encoded("int8", parts, end - begin, True), end - begin)
    source = codec.roundtrip("int8", xs[2])
    for r, res in enumerate(results):
        assert torch.equal(res["int8"], expected), r
        assert torch.equal(res["broadcast"], source), "the source ends with the decoded bytes too"
        assert torch.allclose(res["int8"], torch.stack(xs).mean(0), atol=0.05)
        assert torch.allclose(res["bf16"], torch.stack(xs).sum(0), rtol=0.02, atol=0.05)
        assert res["gather"].view(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
        # bytes as they travel: the all-to-all of the encoded parts, the all-gather
        assert res["int8_sent"] == all_reduce_bytes("int8", n, W, r)[0]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_gloo_processes_compute_the_same_bits_as_the_simulator() -> None:
    spec = {"n": 50_000}
    processes = lsgd.launch(_reduce, W, 2, args=(spec,), timeout=60)
    simulated = lsgd.simulate(_reduce, W, 2, args=(spec,))
    for p, s in zip(processes, simulated):
        assert p["digest"] == s["digest"]
        for key in ("int8_sent", "bf16_sent", "broadcast_sent", "group_sent"):
            assert p[key] == s[key], key


def test_bytes_of_a_compressed_transfer_are_the_codecs_share() -> None:
    plain = 2 * (W - 1) * 4 * CNN7 // W
    for name, low, high in (("bf16", 0.48, 0.52), ("int8", 0.0, 0.27)):
        ratio = all_reduce_bytes(name, CNN7, W, 0)[0] / plain
        assert low <= ratio <= high, (name, ratio)


def _mismatch(info: lsgd.WorkerInfo) -> None:
    comm = lsgd.get_communicator()
    t = torch.zeros(4)
    handle = (comm.start_all_reduce(t) if info.rank % 2 else comm.start_broadcast(t, 0))
    handle.wait()


def test_workers_that_start_different_transfers_fail_naming_them() -> None:
    with pytest.raises(SimulationError, match="mismatched transfers"):
        lsgd.simulate(_mismatch, 2)


def _beside(info: lsgd.WorkerInfo) -> dict[str, float]:
    """A long started transfer, then a small blocking all-gather: it does not wait."""
    comm = lsgd.get_communicator()
    handle = comm.start_all_reduce(torch.zeros(1_000_000))
    comm.all_gather(torch.zeros(1))
    gathered = comm.now()
    handle.wait()
    return {"gathered": gathered, "landed": comm.now()}


def test_blocking_collectives_run_beside_a_started_transfer() -> None:
    results = lsgd.simulate(_beside, W, W, link="20mbit", step_time=[1.0] * W)
    for res in results:
        assert res["gathered"] < 0.001  # three floats' worth, not behind the 1.2 s transfer
        assert res["landed"] == pytest.approx(2 * 3 / 4 * 4e6 * 8 / 20e6)


def test_a_codec_needs_float32() -> None:
    comm = lsgd.comm.LocalCommunicator()
    with pytest.raises(ValueError, match="float32"):
        comm.start_all_reduce(torch.zeros(3, dtype=torch.float64), codec="int8")
    with pytest.raises(ValueError, match="none, bf16, int8"):
        comm.start_all_reduce(torch.zeros(3), codec="zip")
