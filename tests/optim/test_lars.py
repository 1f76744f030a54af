"""Tests for lsgd.optim.lars (LARS, You, Gitman & Ginsburg 2017).

The expected numbers are computed by hand with plain Python floats, not by
re-running the update rule on tensors.
"""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from lsgd.optim.lars import LARS, lars_param_groups

DT = torch.float64


def _param(values: list[float] | list[list[float]]) -> nn.Parameter:
    return nn.Parameter(torch.tensor(values, dtype=DT))


def _set_grad(p: torch.Tensor, values: list[float] | list[list[float]]) -> None:
    p.grad = torch.tensor(values, dtype=DT)


def _close(t: torch.Tensor, expected: list[float]) -> None:
    got = t.detach().reshape(-1).tolist()
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12), (got, expected)


# ---------------------------------------------------------------- the update


def test_one_step_matches_hand_computation() -> None:
    # w = [3, 4] -> ||w|| = 5 ; g = [0.6, 0.8] -> ||g|| = 1
    # wd = 0.1, eta = 0.09: local_lr = 0.09 * 5 / (1 + 0.1 * 5) = 0.45 / 1.5 = 0.3
    # g + wd*w = [0.9, 1.2]; v = 0.1 * 0.3 * [0.9, 1.2] = [0.027, 0.036]
    # w <- [3 - 0.027, 4 - 0.036] = [2.973, 3.964]
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09, nesterov=False)
    _set_grad(p, [0.6, 0.8])
    opt.step()
    _close(p, [2.973, 3.964])
    _close(opt.state[p]["momentum_buffer"], [0.027, 0.036])


def test_two_steps_match_hand_computation() -> None:
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09, nesterov=False)
    _set_grad(p, [0.6, 0.8])
    opt.step()  # -> w1 = [2.973, 3.964], v1 = [0.027, 0.036] (see test above)

    # step 2: g2 = [-1.2, 0.5] -> ||g2|| = sqrt(1.44 + 0.25) = 1.3
    # ||w1|| = sqrt(2.973^2 + 3.964^2) = sqrt(8.838729 + 15.713296) = sqrt(24.552025) = 4.955
    # local_lr = 0.09 * 4.955 / (1.3 + 0.1 * 4.955) = 0.44595 / 1.7955
    # d2 = g2 + 0.1 * w1 = [-1.2 + 0.2973, 0.5 + 0.3964] = [-0.9027, 0.8964]
    # v2 = 0.9 * v1 + 0.1 * local_lr * d2 ; w2 = w1 - v2
    _set_grad(p, [-1.2, 0.5])
    opt.step()
    assert math.sqrt(24.552025) == pytest.approx(4.955, rel=1e-15)
    local_lr = 0.44595 / 1.7955
    v2 = [0.9 * 0.027 + 0.1 * local_lr * -0.9027, 0.9 * 0.036 + 0.1 * local_lr * 0.8964]
    expected = [2.973 - v2[0], 3.964 - v2[1]]
    _close(p, expected)
    _close(opt.state[p]["momentum_buffer"], v2)
    # sanity on the hand numbers themselves
    assert local_lr == pytest.approx(0.2483709273182957, rel=1e-12)


def test_no_momentum_two_steps() -> None:
    # momentum = 0: each step is w <- w - lr * local_lr * (g + wd*w), no memory.
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, momentum=0.0, weight_decay=0.1, eta=0.09, nesterov=False)
    _set_grad(p, [0.6, 0.8])
    opt.step()
    _close(p, [2.973, 3.964])
    _set_grad(p, [-1.2, 0.5])
    opt.step()
    local_lr = 0.44595 / 1.7955
    _close(p, [2.973 - 0.1 * local_lr * -0.9027, 3.964 - 0.1 * local_lr * 0.8964])
    assert "momentum_buffer" not in opt.state[p]


def test_trust_ratio_uses_whole_tensor_norm_for_matrices() -> None:
    # 2x2 weight [[1, 2], [2, 4]]: ||w|| = sqrt(1 + 4 + 4 + 16) = 5
    # grad [[0, 0.5], [0.5, 0]]: ||g|| = sqrt(0.5) ; wd = 0
    # local_lr = 0.001 * 5 / sqrt(0.5) ; w <- w - 2.0 * local_lr * g
    p = _param([[1.0, 2.0], [2.0, 4.0]])
    opt = LARS([p], lr=2.0, nesterov=False)
    _set_grad(p, [[0.0, 0.5], [0.5, 0.0]])
    opt.step()
    step = 2.0 * (0.005 / math.sqrt(0.5)) * 0.5
    _close(p, [1.0, 2.0 - step, 2.0 - step, 4.0])


# ---------------------------------------------------------- zero-norm cases


def test_zero_weight_gives_local_lr_one() -> None:
    # ||w|| = 0 -> local_lr = 1: w <- 0 - 0.1 * ([1, 2] + 0.5 * 0) = [-0.1, -0.2]
    # (the formula would give 0 and leave w at zero)
    p = _param([0.0, 0.0])
    opt = LARS([p], lr=0.1, weight_decay=0.5, nesterov=False)
    _set_grad(p, [1.0, 2.0])
    opt.step()
    _close(p, [-0.1, -0.2])


def test_zero_grad_gives_local_lr_one() -> None:
    # ||g|| = 0 -> local_lr = 1: d = 0 + 0.1 * [3, 4] = [0.3, 0.4]
    # w <- [3 - 0.03, 4 - 0.04] = [2.97, 3.96]
    # (the formula would give 0.001 * 5 / 0.5 = 0.01, i.e. [2.9997, 3.9996])
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, weight_decay=0.1, nesterov=False)
    _set_grad(p, [0.0, 0.0])
    opt.step()
    _close(p, [2.97, 3.96])


def test_zero_grad_and_no_weight_decay_leaves_weight_unchanged() -> None:
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, nesterov=False)
    _set_grad(p, [0.0, 0.0])
    opt.step()
    _close(p, [3.0, 4.0])
    assert torch.isfinite(opt.state[p]["momentum_buffer"]).all()


def test_param_without_grad_is_skipped() -> None:
    p = _param([3.0, 4.0])
    q = _param([1.0, 1.0])
    opt = LARS([p, q], lr=0.1, weight_decay=0.1, nesterov=False)
    _set_grad(p, [0.6, 0.8])
    opt.step()
    _close(q, [1.0, 1.0])
    assert len(opt.state[q]) == 0


# ------------------------------------------------- adapt / exclude_bias_and_norm


def test_1d_param_is_adapted_by_default() -> None:
    # default: 1-D tensors get the trust ratio too: local_lr = 0.09*5/1.5 = 0.3
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, weight_decay=0.1, eta=0.09, nesterov=False)
    _set_grad(p, [0.6, 0.8])
    opt.step()
    _close(p, [2.973, 3.964])


def test_adapt_false_group_uses_local_lr_one() -> None:
    # adapt=False: v = 0.1 * 1 * [0.9, 1.2] = [0.09, 0.12] -> w = [2.91, 3.88]
    a = _param([3.0, 4.0])  # adapt=False
    b = _param([3.0, 4.0])  # adapt default True
    opt = LARS(
        [{"params": [a], "adapt": False}, {"params": [b]}],
        lr=0.1,
        weight_decay=0.1,
        eta=0.09,
        nesterov=False,
    )
    _set_grad(a, [0.6, 0.8])
    _set_grad(b, [0.6, 0.8])
    opt.step()
    _close(a, [2.91, 3.88])
    _close(b, [2.973, 3.964])
    # adapt=False also for a matrix: no trust ratio regardless of ndim
    m = _param([[3.0, 4.0]])
    opt2 = LARS([{"params": [m], "adapt": False}], lr=0.1, weight_decay=0.1, eta=0.09,
                nesterov=False)
    _set_grad(m, [[0.6, 0.8]])
    opt2.step()
    _close(m, [2.91, 3.88])


def test_exclude_bias_and_norm() -> None:
    bias = _param([3.0, 4.0])  # 1-D: local_lr = 1 -> [2.91, 3.88]
    weight = _param([[3.0, 4.0]])  # 2-D: local_lr = 0.3 -> [2.973, 3.964]
    opt = LARS([bias, weight], lr=0.1, weight_decay=0.1, eta=0.09, exclude_bias_and_norm=True,
               nesterov=False)
    _set_grad(bias, [0.6, 0.8])
    _set_grad(weight, [[0.6, 0.8]])
    opt.step()
    _close(bias, [2.91, 3.88])
    _close(weight, [2.973, 3.964])


def test_exclude_bias_and_norm_covers_scalars() -> None:
    # 0-dim parameter, w = 2, g = 0.5, wd = 0: local_lr = 1 -> 2 - 0.1 * 0.5 = 1.95
    s = nn.Parameter(torch.tensor(2.0, dtype=DT))
    opt = LARS([s], lr=0.1, exclude_bias_and_norm=True, nesterov=False)
    s.grad = torch.tensor(0.5, dtype=DT)
    opt.step()
    assert s.item() == pytest.approx(1.95, rel=1e-12)


# ------------------------------------------------------------ lars_param_groups


def test_lars_param_groups_split() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    linear, bn = model[0], model[1]
    groups = lars_param_groups(model, weight_decay=5e-4)
    assert len(groups) == 2
    g0, g1 = groups
    assert [id(p) for p in g0["params"]] == [id(linear.weight)]
    assert g0["adapt"] is True and g0["weight_decay"] == 5e-4
    assert [id(p) for p in g1["params"]] == [id(linear.bias), id(bn.weight), id(bn.bias)]
    assert g1["adapt"] is False and g1["weight_decay"] == 0.0


def test_lars_param_groups_skips_frozen_params() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    model[1].bias.requires_grad_(False)
    model[0].weight.requires_grad_(False)
    g0, g1 = lars_param_groups(model, weight_decay=1e-4)
    assert g0["params"] == []
    assert [id(p) for p in g1["params"]] == [id(model[0].bias), id(model[1].weight)]


def test_lars_param_groups_used_by_optimizer() -> None:
    # 1-D group: adapt=False, wd=0 -> plain momentum SGD: b <- b - lr * g
    model = nn.Sequential(nn.Linear(2, 1)).to(DT)
    lin = model[0]
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[3.0, 4.0]], dtype=DT))
        lin.bias.fill_(1.0)
    opt = LARS(lars_param_groups(model, weight_decay=0.1), lr=0.1, eta=0.09, nesterov=False)
    _set_grad(lin.weight, [[0.6, 0.8]])
    _set_grad(lin.bias, [0.5])
    opt.step()
    _close(lin.weight, [2.973, 3.964])  # local_lr = 0.3, wd = 0.1
    _close(lin.bias, [1.0 - 0.05])  # local_lr = 1, wd = 0


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("lr", 0.0, "0.0"),
        ("lr", -0.1, "-0.1"),
        ("lr", float("nan"), "nan"),
        ("momentum", -0.5, "-0.5"),
        ("momentum", 1.0, "1.0"),
        ("momentum", 1.5, "1.5"),
        ("weight_decay", -0.0001, "-0.0001"),
        ("eta", 0.0, "0.0"),
        ("eta", -2.0, "-2.0"),
    ],
)
def test_bad_hyperparameters_raise(name: str, value: float, fragment: str) -> None:
    kwargs: dict[str, float] = {"lr": 0.1}
    kwargs[name] = value
    p = _param([1.0, 2.0])
    with pytest.raises(ValueError) as excinfo:
        LARS([p], **kwargs)
    msg = str(excinfo.value)
    assert name in msg
    assert fragment in msg


def test_lr_message_format() -> None:
    with pytest.raises(ValueError, match=r"^LARS: lr must be a positive number, got -0\.1$"):
        LARS([_param([1.0])], lr=-0.1)


@pytest.mark.parametrize(
    ("name", "value"),
    [("lr", -1.0), ("momentum", 1.0), ("weight_decay", -1.0), ("eta", 0.0)],
)
def test_bad_group_hyperparameters_raise(name: str, value: float) -> None:
    p = _param([1.0, 2.0])
    with pytest.raises(ValueError, match=name):
        LARS([{"params": [p], name: value}], lr=0.1)


def test_lars_param_groups_rejects_negative_weight_decay() -> None:
    with pytest.raises(ValueError, match="weight_decay"):
        lars_param_groups(nn.Linear(2, 2), weight_decay=-1.0)


# ------------------------------------------------------------------ state dict


def _make_problem(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 4, generator=gen)
    w_true = torch.randn(4, 2, generator=gen)
    y = x @ w_true + 0.1 * torch.randn(32, 2, generator=gen)
    return x, y


def _train(model: nn.Module, opt: LARS, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()


def test_state_dict_round_trip() -> None:
    x, y = _make_problem(0)
    torch.manual_seed(0)
    model_a = nn.Linear(4, 2)
    opt_a = LARS(model_a.parameters(), lr=1.0, momentum=0.9, weight_decay=1e-3)
    _train(model_a, opt_a, x, y, 5)

    model_b = copy.deepcopy(model_a)
    opt_b = LARS(model_b.parameters(), lr=1.0, momentum=0.9, weight_decay=1e-3)
    # Serialize like a checkpoint would: torch's state_dict() hands out references
    # to the live buffers, and load_state_dict() does not copy them.
    buffer = io.BytesIO()
    torch.save(opt_a.state_dict(), buffer)
    buffer.seek(0)
    opt_b.load_state_dict(torch.load(buffer))
    # a third copy with a fresh (zero) momentum buffer, to show the state matters
    model_c = copy.deepcopy(model_a)
    opt_c = LARS(model_c.parameters(), lr=1.0, momentum=0.9, weight_decay=1e-3)

    for p_b in model_b.parameters():
        assert "momentum_buffer" in opt_b.state[p_b]

    _train(model_a, opt_a, x, y, 5)
    _train(model_b, opt_b, x, y, 5)
    _train(model_c, opt_c, x, y, 5)
    for p_a, p_b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(p_a, p_b)
    assert any(not torch.equal(p_a, p_c) for p_a, p_c in zip(model_a.parameters(), model_c.parameters()))


def test_state_dict_round_trip_keeps_group_options() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    opt = LARS(lars_param_groups(model, 1e-4), lr=0.5, eta=0.02, exclude_bias_and_norm=True)
    other = LARS(lars_param_groups(model, 0.0), lr=0.1)
    other.load_state_dict(opt.state_dict())
    for g_o, g in zip(other.param_groups, opt.param_groups):
        for key in ("lr", "eta", "weight_decay", "adapt", "exclude_bias_and_norm", "momentum"):
            assert g_o[key] == g[key]


# ------------------------------------------------------------- closure / train


def test_step_with_closure_returns_loss() -> None:
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, weight_decay=0.1, eta=0.09, nesterov=False)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = 0.3 * p[0] + 0.4 * p[1]  # grad = [0.3, 0.4], ||g|| = 0.5
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss.detach()) == pytest.approx(0.3 * 3.0 + 0.4 * 4.0)
    # local_lr = 0.09 * 5 / (0.5 + 0.5) = 0.45 ; d = [0.6, 0.8]
    # w <- [3 - 0.1*0.45*0.6, 4 - 0.1*0.45*0.8] = [2.973, 3.964]
    _close(p, [2.973, 3.964])


def test_tiny_linear_regression_trains() -> None:
    # Linear model on random data, trained with LARS(lr=5.0, momentum=0.9,
    # eta=0.001 (default), no weight decay); with eta = 0.001 the effective
    # per-layer step is lr * eta = 0.005 of ||w|| per unit-norm gradient.
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 5, generator=gen)
    w_true = torch.randn(5, 1, generator=gen)
    y = x @ w_true + 0.5 + 0.01 * torch.randn(64, 1, generator=gen)
    torch.manual_seed(1234)
    model = nn.Linear(5, 1)
    opt = LARS(model.parameters(), lr=5.0, momentum=0.9)

    def loss_fn() -> torch.Tensor:
        return ((model(x) - y) ** 2).mean()

    initial = loss_fn().item()
    for _ in range(200):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
    final = loss_fn().item()
    assert math.isfinite(final)
    assert final < 0.1 * initial, (initial, final)


# ------------------------------------------------------------ Nesterov momentum


def _reference_nesterov(w: list[float], grads: list[list[float]], lr: float, momentum: float,
                        weight_decay: float, eta: float) -> list[list[float]]:
    """The weights after each step of LARS with Nesterov momentum, in plain floats:
    local_lr = eta ||w|| / (||g|| + wd ||w||) ; d = lr local_lr (g + wd w) ;
    v <- m v + d (v = d on the first step) ; w <- w - (d + m v)."""
    v: list[float] | None = None
    out = []
    for g in grads:
        w_norm = math.sqrt(sum(x * x for x in w))
        g_norm = math.sqrt(sum(x * x for x in g))
        local_lr = eta * w_norm / (g_norm + weight_decay * w_norm)
        d = [lr * local_lr * (gi + weight_decay * wi) for gi, wi in zip(g, w)]
        v = list(d) if v is None else [momentum * vi + di for vi, di in zip(v, d)]
        w = [wi - (di + momentum * vi) for wi, di, vi in zip(w, d, v)]
        out.append(w)
    return out


def test_nesterov_is_the_default_one_step_by_hand() -> None:
    # as test_one_step_matches_hand_computation: d = [0.027, 0.036], v = d,
    # w <- w - (d + 0.9 v) = w - 1.9 d = [3 - 0.0513, 4 - 0.0684]
    p = _param([3.0, 4.0])
    opt = LARS([p], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09)
    assert opt.param_groups[0]["nesterov"] is True
    _set_grad(p, [0.6, 0.8])
    opt.step()
    _close(p, [2.9487, 3.9316])
    _close(opt.state[p]["momentum_buffer"], [0.027, 0.036])


def test_nesterov_several_steps_match_reference() -> None:
    grads = [[0.6, 0.8, -0.3], [-1.2, 0.5, 0.25], [0.1, -0.7, 0.9], [2.0, 0.3, -0.4],
             [-0.05, 0.02, 0.6]]
    w0 = [3.0, 4.0, -1.5]
    expected = _reference_nesterov(w0, grads, lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09)
    p = _param(w0)
    opt = LARS([p], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09, nesterov=True)
    for g, w in zip(grads, expected):
        _set_grad(p, g)
        opt.step()
        _close(p, w)
    # and it is not heavy ball
    q = _param(w0)
    heavy = LARS([q], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09, nesterov=False)
    for g in grads:
        _set_grad(q, g)
        heavy.step()
    assert not torch.allclose(p, q)


def test_nesterov_matrix_matches_reference() -> None:
    # whole-tensor norms for a 2x2 weight, flattened for the reference
    grads = [[[0.0, 0.5], [0.5, 0.0]], [[0.3, -0.2], [0.1, 0.4]], [[-1.0, 0.0], [0.2, 0.2]]]
    expected = _reference_nesterov([1.0, 2.0, 2.0, 4.0], [sum(g, []) for g in grads],
                                   lr=2.0, momentum=0.9, weight_decay=0.0, eta=0.001)
    p = _param([[1.0, 2.0], [2.0, 4.0]])
    opt = LARS([p], lr=2.0)
    for g, w in zip(grads, expected):
        _set_grad(p, g)
        opt.step()
        _close(p, w)


def _same_as_sgd(nesterov: bool, weight_decay: float, steps: int = 8) -> None:
    """LARS with local_lr = 1 (adapt=False) is torch.optim.SGD: bit for bit with lr = 0.5,
    where scaling by lr before or after the momentum sum rounds the same."""
    x, y = _make_problem(3)
    x, y = x.to(DT), y.to(DT)
    torch.manual_seed(3)
    model_a = nn.Linear(4, 2).to(DT)
    model_b = copy.deepcopy(model_a)
    start = model_a.weight.detach().clone()
    lars = LARS([{"params": model_a.parameters(), "adapt": False}], lr=0.5, momentum=0.9,
                weight_decay=weight_decay, eta=0.09, nesterov=nesterov)
    sgd = torch.optim.SGD(model_b.parameters(), lr=0.5, momentum=0.9,
                          weight_decay=weight_decay, nesterov=nesterov)
    for _ in range(steps):
        for model, opt in ((model_a, lars), (model_b, sgd)):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
        for p_a, p_b in zip(model_a.parameters(), model_b.parameters()):
            assert torch.equal(p_a, p_b), (p_a, p_b)
    assert not torch.allclose(model_a.weight, start)  # it did move


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_nesterov_with_trust_ratio_one_is_torch_sgd_nesterov(weight_decay: float) -> None:
    _same_as_sgd(nesterov=True, weight_decay=weight_decay)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_heavy_ball_with_trust_ratio_one_is_torch_sgd(weight_decay: float) -> None:
    _same_as_sgd(nesterov=False, weight_decay=weight_decay)


def test_nesterov_needs_momentum() -> None:
    with pytest.raises(ValueError, match=r"nesterov=True requires momentum > 0.*momentum=0\.0"):
        LARS([_param([1.0])], lr=0.1, momentum=0.0)
    with pytest.raises(ValueError, match=r"nesterov=True.*momentum=0\.0"):
        LARS([{"params": [_param([1.0])], "momentum": 0.0}], lr=0.1)
    LARS([_param([1.0])], lr=0.1, momentum=0.0, nesterov=False)  # plain LARS: fine


def test_state_without_nesterov_key_loads_as_heavy_ball() -> None:
    # a state dict saved before the option existed: its groups were heavy ball
    p = _param([3.0, 4.0])
    old = LARS([p], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09, nesterov=False)
    state = old.state_dict()
    for group in state["param_groups"]:
        del group["nesterov"]
    q = _param([3.0, 4.0])
    new = LARS([q], lr=0.1, momentum=0.9, weight_decay=0.1, eta=0.09)
    new.load_state_dict(state)
    assert new.param_groups[0]["nesterov"] is False
    _set_grad(q, [0.6, 0.8])
    new.step()
    _close(q, [2.973, 3.964])


# ------------------------------------------------ lsgd train: --trust-coefficient


def _lars_settings(**extra: object) -> dict[str, object]:
    return {"optimizer": "lars", "dataset": "synthetic", **extra}


@pytest.mark.parametrize(("momentum", "nesterov", "expected"),
                         [(0.9, True, True), (0.9, False, False), (0.0, True, False)])
def test_make_optimizer_passes_lars_options(momentum: float, nesterov: bool,
                                            expected: bool) -> None:
    from lsgd.train.build import make_optimizer
    from lsgd.train.config import make_config

    cfg = make_config(_lars_settings(momentum=momentum, nesterov=nesterov,
                                     trust_coefficient=0.002, weight_decay=5e-4))
    opt = make_optimizer(cfg, nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)))
    assert isinstance(opt, LARS)
    for group in opt.param_groups:
        assert group["eta"] == 0.002
        assert group["momentum"] == momentum
        assert group["nesterov"] is expected
    assert opt.param_groups[0]["weight_decay"] == 5e-4


def test_trust_coefficient_default_is_lars_eta() -> None:
    import inspect

    from lsgd.train.config import TrainConfig

    assert TrainConfig().optim.trust_coefficient == inspect.signature(LARS).parameters["eta"].default
    assert TrainConfig().optim.trust_coefficient == 0.001


def test_cli_trust_coefficient_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from lsgd.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["train", "--optimizer", "lars", "--dataset", "synthetic",
                 "--trust-coefficient", "0.002", "--out", str(tmp_path / "run"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "trust_coefficient = 0.002\n" in out
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-0.001"])
def test_cli_bad_trust_coefficient_exits_2(value: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from lsgd.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["train", "--optimizer", "lars", "--dataset", "synthetic",
                 f"--trust-coefficient={value}", "--out", str(tmp_path / "run"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--trust-coefficient" in err and value in err and "finite number > 0" in err
    assert "Traceback" not in err
