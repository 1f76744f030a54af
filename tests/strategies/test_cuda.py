"""On a CUDA device (marked ``cuda``, skipped without one; ``scripts/gpu-check.sh`` runs
them): every method in the simulator on CUDA tensors, the codecs on CUDA equal to the
CPU's, two gloo processes sharing one GPU, and a replica of two processes with NCCL
inside where there are two GPUs. ``LSGD_TEST_DEVICE=cpu`` runs the same code on the
CPU (a check of the tests themselves on a machine without a GPU).

These tests import nothing of ``lsgd.train`` and need no conftest (``--noconftest``):
a GPU machine's Python may lack the trainer's own requirements."""

from __future__ import annotations

import os

import pytest
import torch

import lsgd
from lsgd.comm import codec
from lsgd.comm.sparse import SparseFormat
from lsgd.dct import to_blocks
from tests.cases_cuda import METHODS, shared_gpu, train_on, with_nccl_inside

DEVICE = os.environ.get("LSGD_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_on_cuda_in_the_simulator(method: str) -> None:
    """4 workers as threads on one device (2 nodes; DiLoCo also as 2 replicas of 2):
    the loss falls, the state stays on the device and finite."""
    replica = "node" if method == "diloco-replicas" else "process"
    results = lsgd.simulate(train_on, 4, groups=2, args=(method, DEVICE), seed=0,
                            replica=replica)
    for first, last, device, finite in results:
        assert device == torch.device(DEVICE).type and finite
        assert last < first, (method, first, last)


@pytest.mark.parametrize("name", ["bf16", "int8"])
def test_the_codecs_on_cuda_equal_the_cpu(name: str) -> None:
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(5 * codec.BLOCK + 17, generator=generator) * 3
    values[300] = 1e-30  # a tiny value, and a block of zeros
    values[512:768] = 0.0
    here, there = values, values.to(DEVICE)
    assert torch.equal(codec.encode(name, here), codec.encode(name, there).cpu())
    assert torch.equal(codec.roundtrip(name, here), codec.roundtrip(name, there).cpu())
    parts = [codec.encode(name, here * k) for k in (1, 2, 3)]
    reduced = codec.reduce_encoded(name, parts, here.numel(), mean=True)
    on_device = codec.reduce_encoded(name, [p.to(DEVICE) for p in parts], here.numel(), True)
    assert torch.equal(reduced, on_device.cpu())


@pytest.mark.parametrize("values", ["float32", "int8", "2bit"])
def test_the_sparse_format_and_the_dct_on_cuda_equal_the_cpu(values: str) -> None:
    generator = torch.Generator().manual_seed(1)
    rows = torch.randn(7, 64, generator=generator)
    fmt = SparseFormat(5, values)
    here, there = fmt.encode(rows), fmt.encode(rows.to(DEVICE))
    assert torch.equal(here, there.cpu())
    assert torch.equal(fmt.decode(here, 7, 64), fmt.decode(there, 7, 64).cpu())
    weight = torch.randn(48, 40, generator=generator)
    torch.testing.assert_close(to_blocks(weight.to(DEVICE), 16).cpu(), to_blocks(weight, 16),
                               rtol=0, atol=1e-5)


def test_two_gloo_processes_share_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL refuses two ranks on one device ("Duplicate GPU detected"); gloo carries CUDA
    tensors: DiLoCo's average and LSGD's broadcast leave both processes' states equal."""
    monkeypatch.setenv("LSGD_BACKEND", "gloo")
    results = lsgd.launch(shared_gpu, 2, args=(DEVICE,), timeout=120)
    for name in ("diloco", "lsgd"):
        assert results[0][name]["device"] == torch.device(DEVICE).type
        assert torch.equal(results[0][name]["center"], results[1][name]["center"]), name


@pytest.mark.skipif(DEVICE == "cuda" and torch.cuda.device_count() < 2,
                    reason="a replica with NCCL inside needs two GPUs (NCCL refuses two "
                           "ranks on one device)")
def test_a_replica_of_two_processes_with_nccl_inside() -> None:
    """One node of two processes, one GPU each, as one replica (DiLoCo's M = 1): DDP
    over NCCL inside; both processes end with the same model."""
    results = lsgd.launch(with_nccl_inside, 2, groups=1, args=(DEVICE,), replica="node",
                          timeout=120)
    assert torch.equal(results[0], results[1])
