"""All-reduce with PyTorch's own DDP communication hooks (bf16, PowerSGD): what they send,
counted against its formula, and that the replicas stay identical; and a Hugging Face
model in a user's own loop, through the simulator."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import lsgd
from lsgd.comm.wire import ring_allreduce_bytes

ROOT = Path(__file__).resolve().parents[2]
WORLD = 4
STEPS = 6
WARMUP = 3
RANK = 2


class Net(nn.Module):
    """Two matrices PowerSGD compresses, and vectors (biases) it sends whole."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(40, 30)
        self.second = nn.Linear(30, 20)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))


def _hooked(info: lsgd.WorkerInfo, knobs: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    strategy = lsgd.AllReduce(model, opt, **knobs)
    sent = []
    for step in range(STEPS):
        torch.manual_seed(100 * step + info.rank)  # each worker its own batch
        loss = strategy.model(torch.randn(8, 40)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
        sent.append(strategy.report().bytes_sent)
    return {"sent": sent, "state": [p.detach().clone() for p in model.parameters()],
            "details": strategy.report().details}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_hooks_send_what_their_formula_says_and_keep_the_replicas_equal() -> None:
    values = sum(p.numel() for p in Net().parameters())  # 1230 + 620
    plain = lsgd.launch(_hooked, WORLD, args=({},), timeout=60)
    bf16 = lsgd.launch(_hooked, WORLD, args=({"compress": "bf16"},), timeout=60)
    power = lsgd.launch(_hooked, WORLD, args=({"powersgd": RANK, "powersgd_warmup": WARMUP},),
                        timeout=60)
    per_step = ring_allreduce_bytes(4 * values, WORLD)
    assert plain[0]["sent"][-1] == pytest.approx(STEPS * per_step)
    assert bf16[0]["sent"][-1] == pytest.approx(STEPS * ring_allreduce_bytes(2 * values, WORLD))
    # PowerSGD: plain steps first, then P (n x r) and Q (m x r) of each matrix, and the
    # biases whole: (30 + 40) * 2 + (20 + 30) * 2 + 30 + 20 values per step.
    compressed = ring_allreduce_bytes(4 * ((30 + 40) * RANK + (20 + 30) * RANK + 30 + 20), WORLD)
    steps = [b - a for a, b in zip([0.0] + power[0]["sent"], power[0]["sent"])]
    assert steps[:WARMUP] == pytest.approx([per_step] * WARMUP)
    assert steps[WARMUP:] == pytest.approx([compressed] * (STEPS - WARMUP))
    assert power[0]["details"]["gradient_compression"] == "powersgd"
    for results in (plain, bf16, power):  # every replica holds the same model
        for other in results[1:]:
            assert all(torch.equal(a, b) for a, b in zip(results[0]["state"], other["state"]))
    # They compress: the models differ from plain all-reduce's, but not by much.
    for results in (bf16, power):
        gap = max(float((a - b).abs().max()) for a, b in zip(plain[0]["state"],
                                                             results[0]["state"]))
        assert 0 < gap < 0.1


def test_the_simulator_refuses_the_hooks_and_says_why() -> None:
    def one(info: lsgd.WorkerInfo) -> None:
        model = Net()
        lsgd.AllReduce(model, torch.optim.SGD(model.parameters(), lr=0.1), powersgd=2)

    with pytest.raises(lsgd.SimulationError) as caught:
        lsgd.simulate(one, 2)
    assert "DistributedDataParallel" in str(caught.value.__cause__)
    with pytest.raises(ValueError, match="no int8 hook"):
        model = Net()
        lsgd.AllReduce(model, torch.optim.SGD(model.parameters(), lr=0.1), compress="int8")


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("language_model",
                                                  ROOT / "examples" / "language_model.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["language_model"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["diloco", "lsgd", "allreduce"])
def test_a_hugging_face_gpt2_trains_in_a_users_own_loop(method: str, tmp_path: Path) -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("Hugging Face transformers is not installed (pip install 'lsgd[hf]')")
    example = _example()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"{i} times the lord said unto moses, go in peace.\n"
                              for i in range(400)))
    results = lsgd.simulate(example.train, 2, args=(method, 40, str(corpus)))
    first = results[0]
    # An untrained byte model is at ln 256 = 5.55 nats; 40 steps on this text bring it
    # well under 3.
    assert first["validation_loss"] < 3.0, first
    if method == "diloco":  # int8 rounds every 32 steps: one round, a quarter of the bytes
        values = sum(p.numel() for p in example.gpt2().parameters())
        assert first["mb_sent"] * 1e6 < 0.3 * ring_allreduce_bytes(4 * values, 2)
