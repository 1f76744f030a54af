"""SparseLoCo, DeMo and MuLoCo as a user meets them: they resume exactly (transfers in
flight included), their bytes are the gathered payloads on both backends, bad values
are refused by name, and the leader composes where the rule allows it. (Their rules,
exactly: tests/cases_sparse.py.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd.comm.sparse import SparseFormat
from lsgd.optim import MuonAdamW
from tests.scenarios import batches, through_a_checkpoint


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 16)
        self.b = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _optimizer(method: str, model: nn.Module) -> torch.optim.Optimizer:
    if method == "muloco":
        return MuonAdamW(model, lr=0.02, weight_decay=0.0)
    if method == "demo":
        return torch.optim.SGD(model.parameters(), lr=0.01, weight_decay=0.001)
    return torch.optim.AdamW(model.parameters(), lr=0.01)


def _run(info: lsgd.WorkerInfo, method: str, knobs: dict[str, Any], stop: int | None
         ) -> dict[str, Any]:
    torch.manual_seed(0)

    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.Strategy]:
        model = Net()
        opt = _optimizer(method, model)
        return model, opt, lsgd.make_strategy(method, model, opt, **knobs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(batches(info.rank, 10)):
        if step == stop:
            model, opt, strategy = through_a_checkpoint(model, opt, strategy, build)
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    strategy.settle()
    return {"state": model.state_dict(), "stats": strategy.report().as_dict()}


RESUMED = [("sparseloco", {"period": 4, "overlap": 2, "chunk": 64}),
           ("sparseloco", {"period": 2, "fragments": 2, "chunk": 64, "leader": "pull"}),
           ("demo", {"chunk": 8, "topk": 4}), ("demo", {"chunk": 8, "topk": 4, "overlap": 1}),
           ("muloco", {"period": 4, "overlap": 1, "chunk": 64}),
           ("diloco", {"period": 3, "compress": "topk", "density": 0.1, "chunk": 32,
                       "error_feedback": True, "leader": "weights"}),
           ("local-sgd", {"period": 3, "compress": "2bit", "chunk": 32, "error_feedback": True}),
           ("easgd", {"period": 3, "compress": "topk", "values": "int8", "error_feedback": True})]


@pytest.mark.parametrize("method,knobs", RESUMED,
                         ids=[f"{m}-{'-'.join(map(str, k.values()))}" for m, k in RESUMED])
def test_a_resumed_run_equals_the_uninterrupted_one(method: str, knobs: dict[str, Any]) -> None:
    straight = lsgd.simulate(_run, 3, args=(method, knobs, None), seed=0)
    for stop in (3, 5):  # in a period, and with a transfer in flight
        resumed = lsgd.simulate(_run, 3, args=(method, knobs, stop), seed=0)
        for a, b in zip(straight, resumed):
            for key in a["state"]:
                assert torch.equal(a["state"][key], b["state"][key]), (stop, key)
            for key in ("steps", "rounds", "bytes_sent", "bytes_received"):
                assert a["stats"][key] == b["stats"][key], (stop, key)


def _payload(method: str, knobs: dict[str, Any]) -> int:
    """One worker's payload per round, from the format's own byte count."""
    numel = sum(p.numel() for p in Net().parameters())
    if method == "demo":
        return round(lsgd.DeMo.payload_fraction(Net(), knobs["topk"], knobs["chunk"]) * 4 * numel)
    rows = -(-numel // knobs["chunk"])
    return SparseFormat(max(1, round(knobs["density"] * knobs["chunk"])),
                        knobs["values"]).nbytes(rows, knobs["chunk"])


@pytest.mark.parametrize("method,knobs,rounds", [
    ("sparseloco", {"period": 2, "chunk": 64, "density": 0.05, "values": "2bit"}, 5),
    ("demo", {"chunk": 8, "topk": 2}, 10)])
def test_the_bytes_are_the_gathered_payloads(method: str, knobs: dict[str, Any],
                                             rounds: int) -> None:
    results = lsgd.simulate(_run, 3, args=(method, knobs, None), seed=0)
    for r in results:  # a ring all-gather of 3: each sends and receives 2 payloads a round
        assert r["stats"]["rounds"] == rounds
        assert r["stats"]["bytes_sent"] == rounds * 2 * _payload(method, knobs)
        assert r["stats"]["bytes_received"] == r["stats"]["bytes_sent"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gloo_processes_send_the_simulators_bytes_and_reach_its_states() -> None:
    cases = [("sparseloco", {"period": 2, "chunk": 64, "density": 0.05, "values": "2bit"}),
             ("demo", {"chunk": 8, "topk": 2, "overlap": 1})]
    processes = lsgd.launch(_bundle, 3, args=(cases,), timeout=60)
    for i, (method, knobs) in enumerate(cases):
        simulated = lsgd.simulate(_run, 3, args=(method, knobs, None), seed=0)
        for p, s in zip(processes, simulated):
            for key in ("bytes_sent", "bytes_received", "rounds"):
                assert p[i]["stats"][key] == s["stats"][key], (method, key)
            for key in s["state"]:  # the same bytes decoded in the same order
                assert torch.equal(p[i]["state"][key], s["state"][key]), (method, key)


def _bundle(info: lsgd.WorkerInfo, cases: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    return [_run(info, method, knobs, None) for method, knobs in cases]


def _build(info: lsgd.WorkerInfo, method: str, knobs: dict[str, Any],
           optimizer: str = "") -> None:
    model = Net()
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "momentum"
           else _optimizer(method, model))
    lsgd.make_strategy(method, model, opt, **knobs)


@pytest.mark.parametrize("method,knobs,optimizer,words", [
    ("diloco", {"compress": "topk", "density": 0}, "", "density must be a number in (0, 1]"),
    ("diloco", {"compress": "topk", "density": 1.5}, "", "got 1.5"),
    ("diloco", {"compress": "topk", "density": -0.1}, "", "got -0.1"),
    ("diloco", {"compress": "topk", "values": "4bit"}, "", "values"),
    ("diloco", {"density": 0.1}, "", "give compress='topk'"),
    ("diloco", {"compress": "2bit", "values": "int8"}, "", "give compress='topk'"),
    ("diloco", {"error_feedback": True}, "", "compress='none' drops nothing"),
    ("diloco", {"compress": "int8", "feedback_decay": 0.5}, "", "give error_feedback=True"),
    ("lsgd", {"compress": "topk"}, "", "sends one worker's state"),
    ("demo", {"overlap": 2}, "", "overlap must be 0 or 1"),
    ("demo", {"leader": "pull"}, "", "DeMo's workers hold one state"),
    ("demo", {}, "momentum", "torch.optim.SGD with momentum=0"),
    ("muloco", {}, "momentum", "give lsgd.optim.MuonAdamW"),
    ("sparseloco", {"compress": "int8"}, "", "unknown argument(s) compress; sparseloco takes"),
    ("sparseloco", {"outer": "eager"}, "", "unknown argument(s) outer"),
    ("easgd", {"leader": "pull"}, "", "unknown argument(s) leader"),
    ("diloco", {"compress": "topk", "outer": "eager", "overlap": 1}, "", "takes no overlap"),
])
def test_bad_values_are_refused_by_name(method: str, knobs: dict[str, Any], optimizer: str,
                                        words: str) -> None:
    with pytest.raises(lsgd.SimulationError, match=None) as raised:
        lsgd.simulate(_build, 2, args=(method, knobs, optimizer))
    assert words in str(raised.value), str(raised.value)


def _leader_round(info: lsgd.WorkerInfo, mode: str) -> torch.Tensor:
    """SparseLoCo with the leader's force: workers 0 and 1 move apart; rank 1 leads."""
    model = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    strategy = lsgd.SparseLoCo(model, opt, period=1, outer_lr=1.0, feedback_decay=0.0,
                               density=1.0, chunk=4, values="float32", leader=mode)
    model.weight.grad = torch.full((1, 4), -1.0 if info.rank == 1 else 1.0)
    strategy.step(torch.tensor(1.0 - info.rank))
    return model.weight.detach().reshape(-1).clone()


def test_a_fixed_choice_of_sparseloco_names_the_method_to_use() -> None:
    model = Net()
    with pytest.raises(ValueError, match="compress='int8' is fixed by SparseLoCo .* use DiLoCo"):
        lsgd.SparseLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), compress="int8",
                        comm=lsgd.comm.LocalCommunicator())


@pytest.mark.parametrize("mode,expected", [("none", 0.0), ("weights", 1 / 3), ("pull", 0.5)])
def test_the_leader_on_sparseloco(mode: str, expected: float) -> None:
    """The workers step to -1 and +1 (rank 1, the leader): the plain mean is 0; weights
    count the leader twice, (1 - 1 + 1) / 3; pull moves the mean halfway to +1."""
    for x in lsgd.simulate(_leader_round, 2, args=(mode,)):
        assert torch.allclose(x, torch.full((4,), expected)), x
