"""Overlapped, fragmented and compressed rounds: each delayed update against a reference
written from its definition, compressed references equal on every worker, checkpoints
taken with a transfer in flight, and the time overlap saves on the modeled clock."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd.comm import codec
from lsgd.comm.chain import chunk_count
from lsgd.comm.wire import LinkModel
from tests.scenarios import SmallNet, batches, through_a_checkpoint

X0 = [[1.0, 8.0], [2.0, 4.0], [3.0, 0.0], [4.0, -4.0]]
GRADS = [[0.5, 0.0], [0.0, 0.25], [0.25, 0.25], [-0.5, 0.0]]
LOSSES = [3.0, 1.0, 2.0, 4.0]  # rank 1 always leads
W = 4


class Vector(nn.Module):
    """One parameter vector (float64 by default: exact binary fractions)."""

    def __init__(self, values: list[float], dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(values, dtype=dtype))


def _scripted(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any],
              steps: int) -> dict[str, Any]:
    """Constant gradient ``GRADS[rank]`` at lr 1 from ``X0[rank]`` (independent starts);
    the state after every step, and the strategy's report."""
    model = Vector(X0[info.rank])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    strategy = lsgd.make_strategy(method, model, opt, init="independent", **kwargs)
    xs = []
    for _ in range(steps):
        model.w.grad = torch.tensor(GRADS[info.rank], dtype=torch.float64)
        strategy.step(torch.tensor(LOSSES[info.rank], dtype=torch.float64))
        xs.append(model.w.detach().clone().tolist())
    strategy.settle()
    return {"x": xs, "report": strategy.report()}


def _free(rank: int, step: int) -> list[float]:
    """A worker's state after ``step`` steps of its own, from its start."""
    return [x - step * g for x, g in zip(X0[rank], GRADS[rank])]


def _run(method: str, steps: int, **kwargs: Any) -> list[dict[str, Any]]:
    return lsgd.simulate(_scripted, W, args=(method, kwargs, steps), seed=0)


# -- delayed updates, exactly ------------------------------------------------------------
def test_lsgd_pulls_toward_the_leader_as_it_was_when_the_round_started() -> None:
    """Period 4, overlap 2: the round of step 4 elects rank 1 and sends its step-4 state;
    after step 6 every other worker moves half of the way from its step-6 state to it."""
    out = _run("lsgd", 8, pull=0.5, scope=0.0, period=4, overlap=2)
    leader = _free(1, 4)
    for r, res in enumerate(out):
        for step in range(1, 6):
            assert res["x"][step - 1] == _free(r, step), (r, step)  # nothing lands before 6
        now = _free(r, 6)
        expected = now if r == 1 else [a + 0.5 * (b - a) for a, b in zip(now, leader)]
        assert res["x"][5] == expected, f"rank {r} did not move half way to the step-4 leader"
        # step 7 and 8: plain steps on top (the next round, at 8, lands at 10)
        assert res["x"][7] == [x - 2 * g for x, g in zip(expected, GRADS[r])]
        # two rounds started (4 and 8); the first landed at 6 (no first election: scope 0)
        assert res["report"].rounds == 2
        assert res["report"].leader_history == ((6, "global", 1),)


def _nesterov(theta: list[float], mean: list[float], velocity: list[float], lr: float,
              mu: float) -> tuple[list[float], list[float]]:
    """torch's Nesterov SGD step on θ with gradient Δ = θ - mean: (θ', v')."""
    delta = [t - m for t, m in zip(theta, mean)]
    velocity = [mu * v + d for v, d in zip(velocity, delta)]
    return [t - lr * (d + mu * v) for t, d, v in zip(theta, delta, velocity)], velocity


@pytest.mark.parametrize("merge", ["keep", "replace", "mix"])
def test_diloco_takes_the_outer_step_on_the_round_mean_then_merges(merge: str) -> None:
    out = _run("diloco", 6, period=4, overlap=2, outer_lr=0.5, outer_momentum=0.5,
               merge=merge)
    theta0 = [sum(X0[r][i] for r in range(W)) / W for i in range(2)]  # mean of the starts
    mean4 = [sum(_free(r, 4)[i] for r in range(W)) / W for i in range(2)]
    theta, _ = _nesterov(theta0, mean4, [0.0, 0.0], 0.5, 0.5)
    for r, res in enumerate(out):
        assert res["x"][4] == _free(r, 5), "the outer step lands after step 6, not before"
        now, then = _free(r, 6), _free(r, 4)
        expected = {"keep": [t + n - s for t, n, s in zip(theta, now, then)],
                    "replace": theta,
                    "mix": [t + 0.5 * (n - t) for t, n in zip(theta, now)]}[merge]
        assert res["x"][5] == pytest.approx(expected, rel=0, abs=1e-12), (r, merge)


@pytest.mark.parametrize("method", ["diloco", "local-sgd"])
def test_a_merge_without_overlap_is_refused(method: str) -> None:
    model = Vector([1.0])
    with pytest.raises(ValueError, match="needs overlap > 0"):
        lsgd.make_strategy(method, model, torch.optim.SGD(model.parameters(), lr=0.1),
                           comm=lsgd.comm.LocalCommunicator(), fragments=1, merge="mix")


def test_local_sgd_lands_the_round_average_and_keeps_the_progress_since() -> None:
    out = _run("local-sgd", 6, period=4, overlap=2)
    mean4 = [sum(_free(r, 4)[i] for r in range(W)) / W for i in range(2)]
    for r, res in enumerate(out):
        progress = [n - s for n, s in zip(_free(r, 6), _free(r, 4))]
        assert res["x"][5] == [m + p for m, p in zip(mean4, progress)]


def test_easgd_pulls_the_state_of_now_toward_the_center_of_the_round() -> None:
    """x <- x - alpha (x - c) with x the state after step 6 and c the center (its value
    when the round started, which only rounds change); c <- c + beta (mean_4 - c)."""
    out = _run("easgd", 6, period=4, overlap=2, moving_rate=0.5)
    center = [sum(X0[r][i] for r in range(W)) / W for i in range(2)]
    alpha = 0.5 / W
    for r, res in enumerate(out):
        now = _free(r, 6)
        assert res["x"][5] == [x - alpha * (x - c) for x, c in zip(now, center)]
        assert res["x"][3] == _free(r, 4)


def test_fragments_send_each_part_at_its_offset_with_an_outer_step_of_its_own() -> None:
    """Two fragments of a 2-vector: element 0 at steps 2 and 6, element 1 at 4 and 8."""
    out = _run("diloco", 4, period=4, fragments=2, outer_lr=0.5, outer_momentum=0.5)
    theta0 = [sum(X0[r][i] for r in range(W)) / W for i in range(2)]
    first, _ = _nesterov([theta0[0]], [sum(_free(r, 2)[0] for r in range(W)) / W], [0.0],
                         0.5, 0.5)
    second, _ = _nesterov([theta0[1]], [sum(_free(r, 4)[1] for r in range(W)) / W], [0.0],
                          0.5, 0.5)
    for r, res in enumerate(out):
        assert res["x"][1] == [first[0], _free(r, 2)[1]], "only element 0 lands at step 2"
        assert res["x"][3] == [first[0] - 2 * GRADS[r][0], second[0]]
        assert res["report"].rounds == 2
        # every round all-reduces one float64 of 2: (W - 1) / W * 2 * 8 bytes sent
        assert res["report"].bytes_sent == 2 * (2 * (W - 1) * 8 // W)


# -- compressed rounds ---------------------------------------------------------------------
def _train(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], steps: int
           ) -> dict[str, Any]:
    torch.manual_seed(info.rank)
    model = SmallNet(batchnorm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = lsgd.make_strategy(method, model, opt, **kwargs)
    for x, y in batches(info.rank, steps):
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    strategy.settle()
    references = {"lsgd": lambda s: [b for lv in s.levels for b in lv.snapshot.buffers],
                  "diloco": lambda s: s.global_state.buffers,
                  "local-sgd": lambda s: s.reference.buffers,
                  "easgd": lambda s: s.center_state.buffers}
    pipelined = strategy.hides_rounds
    return {"reference": [b.clone() for b in references[method](strategy)] if pipelined else [],
            "state": [p.detach().clone() for p in model.parameters()],
            "report": strategy.report()}


@pytest.mark.parametrize("method,kwargs", [
    ("lsgd", {"period": 2, "compress": "int8"}),
    ("lsgd", {"period": 2, "global_period": 4, "compress": "bf16", "overlap": 1}),
    ("diloco", {"period": 4, "compress": "int8", "overlap": 2, "fragments": 2}),
    ("diloco", {"period": 4, "compress": "int8", "error_feedback": True}),
    ("local-sgd", {"period": 4, "compress": "int8", "overlap": 3}),
    ("easgd", {"period": 4, "compress": "bf16", "overlap": 1}),
])
def test_a_compressed_rounds_reference_is_the_same_on_every_worker(method: str,
                                                                   kwargs: dict[str, Any]
                                                                   ) -> None:
    groups = 2 if "global_period" in kwargs else 1
    results = lsgd.simulate(_train, W, groups, args=(method, kwargs, 12), seed=0)
    size = W // groups
    for r, res in enumerate(results):
        # LSGD's node level: the same within the node; every other reference: everywhere
        same_as = results[r - r % size] if method == "lsgd" and groups > 1 else results[0]
        for got, want in zip(res["reference"], same_as["reference"]):
            assert torch.equal(got, want), f"rank {r}'s reference drifted"
        if groups > 1:  # the global level (the last buffer) is everyone's
            assert torch.equal(res["reference"][-1], results[0]["reference"][-1])
    assert results[0]["report"].rounds > 0


def _first_lsgd_round(info: lsgd.WorkerInfo, kwargs: dict[str, Any]) -> dict[str, Any]:
    model = Vector([float(v) / 3 for v in range(1, 301)], torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    strategy = lsgd.LSGD(model, opt, pull=0.5, scope=0.0, period=1, **kwargs)
    before = [b.clone() for b in strategy.levels[-1].snapshot.buffers]  # rank 0's start
    with torch.no_grad():  # the workers drift apart from their common start
        model.w.mul_(info.rank + 1)
    leader_state = model.w.detach().clone()
    model.w.grad = torch.zeros_like(model.w)
    strategy.step(torch.tensor(float(10 - info.rank)))  # rank 3 leads
    gathered = strategy.comm.all_gather(leader_state)
    return {"before": before, "after": strategy.levels[-1].snapshot.buffers[0].clone(),
            "x": model.w.detach().clone(), "leader": gathered[3]}


@pytest.mark.parametrize("compress", ["bf16", "int8"])
def test_lsgd_reconstructs_the_leader_from_the_same_bytes_everywhere(compress: str) -> None:
    """reference' = reference + decode(encode(x_leader - reference)) on every worker, and
    the pull goes toward that reconstruction."""
    results = lsgd.simulate(_first_lsgd_round, W, args=({"compress": compress},), seed=0)
    reference = results[0]["before"][0]
    leader = results[0]["leader"]
    expected = reference + codec.roundtrip(compress, leader - reference)
    for r, res in enumerate(results):
        assert torch.equal(res["after"], expected), r
        if r != 3:
            start = torch.tensor([float(v) / 3 for v in range(1, 301)]) * (r + 1)
            assert torch.allclose(res["x"], start + 0.5 * (expected - start), atol=1e-6)


@pytest.mark.parametrize("method,kwargs", [("diloco", {"period": 2}), ("lsgd", {"period": 2}),
                                           ("local-sgd", {"period": 2})])
@pytest.mark.parametrize("compress,low,high", [("bf16", 0.48, 0.52), ("int8", 0.0, 0.27)])
def test_a_compressed_round_sends_the_codecs_share_of_the_bytes(method: str,
                                                                kwargs: dict[str, Any],
                                                                compress: str, low: float,
                                                                high: float) -> None:
    """On a CNN7-sized state (1.4 MB), counted as sent, scales and padding included."""
    def bytes_sent(options: dict[str, Any]) -> float:
        results = lsgd.simulate(_big_rounds, W, W, args=(method, kwargs | options, 4), seed=0)
        return sum(r["sent"] for r in results)

    ratio = bytes_sent({"compress": compress}) / bytes_sent({})
    assert low <= ratio <= high, ratio


def _big_rounds(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], steps: int
                ) -> dict[str, Any]:
    """A 348,746-value state (CNN7's), constant gradients, ``steps`` steps."""
    torch.manual_seed(info.rank)
    model = Vector(torch.randn(348_746).tolist(), torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    strategy = lsgd.make_strategy(method, model, opt, **kwargs)
    before = strategy.comm.now()
    for step in range(steps):
        model.w.grad = torch.ones_like(model.w) * (info.rank + 1)
        strategy.step(torch.tensor(float(info.rank + step)))
    strategy.settle()
    # the initial election's broadcast (LSGD) is a round too: all rounds counted
    return {"sent": strategy.report().bytes_sent, "seconds": strategy.comm.now() - before}


# -- time: the modeled clock shows the overlap ---------------------------------------------
@pytest.mark.parametrize("method,period,overlap", [("diloco", 16, 8), ("lsgd", 8, 5)])
def test_overlap_covering_the_transfer_gives_more_steps_per_second(
        method: str, period: int, overlap: int) -> None:
    """4 single-worker nodes behind 20 Mbit/s, 0.12 s per step: DiLoCo's all-reduce of
    1.4 MB takes 0.84 s, LSGD's pipelined chain broadcast 0.61 s; each hidden behind
    8 (5) steps. Four rounds, each landed (``4 period + overlap`` steps)."""
    steps = 4 * period + overlap
    nbytes, link = 4 * 348_746, LinkModel(20e6, 0.0, lambda rank: rank)
    transfer = (link.all_reduce(nbytes, list(range(W))) if method == "diloco" else
                link.broadcast(nbytes, list(range(W)), 0, "chain", chunk_count(nbytes)))

    def clock(options: dict[str, Any]) -> float:
        results = lsgd.simulate(_big_rounds, W, W, args=(method, {"period": period} | options,
                                                             steps),
                                seed=0, link="20mbit", step_time=[0.12] * W)
        return max(r["seconds"] for r in results)

    blocking, hidden = clock({}), clock({"overlap": overlap})
    compute = steps * 0.12
    rounds = 4 + (method == "lsgd")  # blocking LSGD's first election after step 1 too
    assert blocking == pytest.approx(compute + rounds * transfer, rel=0.01)
    assert blocking / hidden >= 1.3, (blocking, hidden)
    # hidden LSGD elects early and holds no first election: no transfer is waited for
    assert hidden == pytest.approx(compute, rel=0.01)


def _started(info: lsgd.WorkerInfo, nbytes: int) -> dict[str, float]:
    comm = lsgd.get_communicator()
    first = torch.zeros(nbytes // 4)
    second = torch.zeros(nbytes // 4)
    t0 = comm.now()
    one = comm.start_all_reduce(first)
    two = comm.start_all_reduce(second)
    comm.local_step()  # one step of 1 s
    one.wait()
    t1 = comm.now()
    two.wait()
    return {"start": t0, "first": t1, "second": comm.now()}


def test_a_started_transfer_costs_only_what_is_left_of_it_and_they_queue() -> None:
    nbytes = 2_000_000
    results = lsgd.simulate(_started, W, W, args=(nbytes,), link="20mbit",
                            step_time=[1.0] * W)
    link = LinkModel(20e6, 0.0, lambda rank: rank)
    t = link.all_reduce(nbytes, list(range(W)))  # 1.2 s
    for res in results:
        assert res["start"] == 0.0
        assert res["first"] == pytest.approx(max(1.0, t))  # 0.2 s waited after the step
        assert res["second"] == pytest.approx(2 * t)  # the second begins when the first ends


# -- checkpoints with a transfer in flight ------------------------------------------------
def _interrupted(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], cut: int | None,
                 steps: int) -> list[torch.Tensor]:
    """Train ``steps`` steps; with ``cut``, rebuild everything from state dicts after
    step ``cut`` (a transfer is then in flight) and go on."""
    torch.manual_seed(info.rank)

    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.Strategy]:
        torch.manual_seed(0)
        model = SmallNet(batchnorm=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, lsgd.make_strategy(method, model, opt, **kwargs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(batches(info.rank, steps), start=1):
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
        if step == cut:
            model, opt, strategy = through_a_checkpoint(model, opt, strategy, build,
                                                        on_disk=False)
    strategy.settle()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("method,kwargs,cut", [
    ("diloco", {"period": 4, "overlap": 3, "fragments": 2, "compress": "int8",
                "error_feedback": True}, 5),
    ("lsgd", {"period": 4, "overlap": 2, "compress": "int8"}, 5),
    # after step 7: the second part in flight, and the early election's scores
    ("lsgd", {"period": 4, "overlap": 2, "fragments": 2, "compress": "int8",
              "leader_momentum": 0.5}, 7),
    ("local-sgd", {"period": 4, "overlap": 2}, 5),
    ("easgd", {"period": 4, "overlap": 2, "compress": "bf16"}, 5),
])
def test_a_checkpoint_taken_with_a_transfer_in_flight_resumes_exactly(
        method: str, kwargs: dict[str, Any], cut: int) -> None:
    whole = lsgd.simulate(_interrupted, W, args=(method, kwargs, None, 14), seed=0)
    resumed = lsgd.simulate(_interrupted, W, args=(method, kwargs, cut, 14), seed=0)
    for a, b in zip(whole, resumed):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


# -- the defaults are the blocking rounds ----------------------------------------------------
@pytest.mark.parametrize("method,defaults", [
    ("lsgd", {"overlap": 0, "compress": "none"}),
    ("diloco", {"overlap": 0, "fragments": 1, "compress": "none"}),
    ("local-sgd", {"overlap": 0, "fragments": 1, "compress": "none"}),
    ("easgd", {"overlap": 0, "fragments": 1, "compress": "none"}),
])
def test_the_default_options_are_the_blocking_rounds_bit_for_bit(method: str,
                                                                  defaults: dict[str, Any]
                                                                  ) -> None:
    plain = lsgd.simulate(_train, W, args=(method, {"period": 3}, 10), seed=0)
    given = lsgd.simulate(_train, W, args=(method, {"period": 3} | defaults, 10), seed=0)
    for a, b in zip(plain, given):
        assert all(torch.equal(x, y) for x, y in zip(a["state"], b["state"]))
        assert a["report"].bytes_sent == b["report"].bytes_sent
    model = SmallNet()
    strategy = lsgd.make_strategy(method, model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  comm=lsgd.comm.LocalCommunicator(), **defaults)
    assert not strategy.hides_rounds  # the blocking rounds themselves
