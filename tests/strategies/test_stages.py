"""The stages of an averaging round, one by one (lsgd.strategies.stages), and error
feedback through whole rounds: for every codec, with and without the leader, the
accumulator equals exactly what the codec dropped, and feedback changes the result."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import lsgd
from lsgd.comm import codec as codecs
from lsgd.comm.sparse import SparseFormat, as_rows, density_to_k, from_rows
from lsgd.flat import FlatBuffer
from lsgd.strategies.stages.feedback import ErrorFeedback
from lsgd.strategies.stages.land import Landing
from lsgd.strategies.stages.message import Message
from lsgd.strategies.stages.move import Chunks, Gather
from lsgd.strategies.stages.parts import StateParts

LR = 0.125
GRADS = [[1.0, -2.0, 0.5, 3.0, 0.25, -1.0, 2.0, -0.5], [-1.5, 0.5, 1.0, -3.0, 2.0, 0.75, -0.25, 1.0]]


def _parts(values: list[float]) -> StateParts:
    return StateParts(lsgd.comm.LocalCommunicator(), [torch.tensor(values)], 1)


def test_the_message_is_the_part_or_its_difference_from_the_reference() -> None:
    parts = _parts([1.0, 2.0, 4.0])
    reference = FlatBuffer(parts.tensors).copy_from([torch.tensor([2.0, 2.0, 2.0])])
    assert Message(parts, False).build(0, None)[0][0].tolist() == [1.0, 2.0, 4.0]
    message, now = Message(parts, True).build(0, reference)
    assert message[0].tolist() == [1.0, 0.0, -2.0] and now[0].tolist() == [1.0, 2.0, 4.0]


class Rounding:
    """A codec that keeps whole numbers only."""

    def roundtrip(self, message: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t.floor() for t in message]


@pytest.mark.parametrize("decay", [1.0, 0.5])
def test_error_feedback_sends_the_message_plus_the_decayed_residual(decay: float) -> None:
    feedback = ErrorFeedback(_parts([0.0, 0.0]), decay)
    message = [torch.tensor([1.25, 2.5])]
    feedback.send(message, 0, Rounding())
    assert message[0].tolist() == [1.25, 2.5] and feedback.residual.buffers[0].tolist() == [0.25, 0.5]
    message = [torch.tensor([0.5, 0.75])]
    feedback.send(message, 0, Rounding())
    sent = [0.5 + decay * 0.25, 0.75 + decay * 0.5]
    assert message[0].tolist() == sent
    assert feedback.residual.buffers[0].tolist() == [v - int(v) for v in sent]


@pytest.mark.parametrize("merge,expected", [("replace", [10.0, 20.0]), ("keep", [13.0, 19.0]),
                                            ("mix", [7.0, 10.5])])
def test_a_landing_merges_the_steps_taken_since(merge: str, expected: list[float]) -> None:
    parts = _parts([4.0, 1.0])  # the part started at [1, 2] and took steps since
    Landing(parts, 1, merge).land(0, [torch.tensor([10.0, 20.0])], [torch.tensor([1.0, 2.0])])
    assert parts.tensors[0].tolist() == expected
    parts = _parts([4.0, 1.0])
    Landing(parts, 1, merge).land(0, [torch.tensor([10.0, 20.0])], weight=0.25)
    assert parts.tensors[0].tolist() == [5.5, 5.75]  # EASGD's elastic step: a quarter of the way


def _gather(info: lsgd.WorkerInfo, fmt: SparseFormat, chunk: int) -> dict[str, Any]:
    comm = lsgd.get_communicator()
    move = Gather(comm, Chunks(fmt, chunk), blocking=True)
    message = [torch.arange(10.0) * (info.rank + 1) - 3.0 * info.rank]
    before = comm.stats()
    _, tensors = move.start([t.clone() for t in message], "world", False)
    moved = comm.stats().minus(before)
    mean, kept = move.finish(tensors, None, 1)
    return {"mean": mean[0], "kept": kept[0], "sent": moved.bytes_sent,
            "payload": move.nbytes(message), "message": message[0]}


@pytest.mark.parametrize("values", ["float32", "int8", "2bit"])
def test_the_gathered_mean_is_every_members_decoded_message(values: str) -> None:
    fmt, chunk = SparseFormat(3, values), 4
    results = lsgd.simulate(_gather, 3, args=(fmt, chunk))
    decoded = [from_rows(fmt.roundtrip(as_rows(r["message"], chunk)), 10) for r in results]
    expected = sum(decoded) / 3
    for r in results:
        assert torch.equal(r["mean"], results[0]["mean"])  # the same on every member
        assert torch.allclose(r["mean"], expected, atol=1e-6)
        assert torch.equal(r["kept"], decoded[1])
        assert r["payload"] == fmt.nbytes(3, chunk) and r["sent"] == 2 * r["payload"]


# -- error feedback through whole rounds ----------------------------------------------------
def _feedback(info: lsgd.WorkerInfo, method: str, knobs: dict[str, Any]) -> dict[str, Any]:
    model = nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-1.0, 1.0, 8))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    strategy = lsgd.make_strategy(method, model, opt, period=2, **knobs)
    checks, residual = [], torch.zeros(8)
    for step in range(1, 7):
        theta = strategy._round.reference.buffers[0].clone() if step % 2 == 0 else None
        model.weight.grad = torch.tensor([GRADS[info.rank]]) / 3.0
        before = model.weight.detach().reshape(-1).add(model.weight.grad.reshape(-1), alpha=-LR)
        strategy.step(torch.tensor(float(info.rank)))
        if theta is not None and knobs.get("error_feedback"):  # a round: u = Δ + β e, the new e is what the codec drops of u
            decay = knobs.get("feedback_decay", 1.0)
            # leader="weights" on an all-reduce: each sends its weighted message (rank 0,
            # the lowest loss, counts twice: 2/3 against 1/3)
            weight = ((2 / 3 if info.rank == 0 else 1 / 3) if knobs.get("leader") == "weights"
                      else 1.0)
            u = (theta - before) * weight + decay * residual
            residual = strategy.state_dict()["rounds_of"]["residual"][0].clone()
            checks.append((u, residual))
    return {"checks": checks, "x": model.weight.detach().clone()}


def _dropped(knobs: dict[str, Any], u: torch.Tensor) -> torch.Tensor:
    compress = knobs["compress"]
    if compress in ("bf16", "int8"):
        return u - codecs.roundtrip(compress, u)
    chunk = knobs.get("chunk", 4096)
    k = chunk if compress == "2bit" else density_to_k(knobs["density"], chunk)
    fmt = SparseFormat(k, "2bit" if compress == "2bit" else knobs.get("values", "float32"))
    return u - from_rows(fmt.roundtrip(as_rows(u, chunk)), u.numel())


FEEDBACK = [("diloco", {"compress": "int8"}), ("diloco", {"compress": "bf16"}),
            ("local-sgd", {"compress": "int8"}), ("easgd", {"compress": "int8"}),
            ("diloco", {"compress": "int8", "leader": "pull"}),
            ("diloco", {"compress": "int8", "leader": "weights"}),
            ("diloco", {"compress": "topk", "density": 0.25, "chunk": 4}),
            ("diloco", {"compress": "topk", "density": 0.5, "chunk": 4, "values": "2bit",
                        "feedback_decay": 0.5}),
            ("local-sgd", {"compress": "2bit", "chunk": 4}),
            ("diloco", {"compress": "topk", "density": 0.25, "chunk": 4, "leader": "pull"})]


@pytest.mark.parametrize("method,knobs", FEEDBACK,
                         ids=[f"{m}-{'-'.join(map(str, k.values()))}" for m, k in FEEDBACK])
def test_the_residual_is_what_the_codec_dropped_and_feedback_changes_the_run(
        method: str, knobs: dict[str, Any]) -> None:
    with_feedback = lsgd.simulate(_feedback, 2, args=(method, {**knobs, "error_feedback": True}))
    plain = {k: v for k, v in knobs.items() if k != "feedback_decay"}
    without = lsgd.simulate(_feedback, 2, args=(method, plain))
    for result in with_feedback:
        assert len(result["checks"]) == 3
        for u, residual in result["checks"]:
            assert residual.abs().sum() > 0  # the codec dropped something
            assert torch.allclose(residual, _dropped(knobs, u), rtol=0, atol=1e-6)
    assert not torch.equal(with_feedback[0]["x"], without[0]["x"])
