"""SparseLoCo, DeMo and MuLoCo against references written from their rules in
docs/algorithms.md, run under both backends (tests/strategies/test_rules_simulated.py,
tests/comm/test_distributed.py).

The references know nothing of lsgd's stages or codecs: the top-k by a sort, 2-bit
values by their bins, the DCT from its textbook formula, the steps one by one. The
model is two float32 parameters, a vector of 8 and a 4 x 6 matrix (one flat state of
32 values, parameters in that order); every rank has its own constant gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

WORLD, STEPS, LR = 2, 8, 0.125
SHAPES = [(8,), (4, 6)]


def start() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randn(s, generator=g) for s in SHAPES]


def grads(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(s, generator=g) for s in SHAPES]


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def unflat(values: torch.Tensor) -> list[torch.Tensor]:
    out, offset = [], 0
    for s in SHAPES:
        n = math.prod(s)
        out.append(values[offset:offset + n].reshape(s))
        offset += n
    return out


def topk_rows(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest |values| of each row kept (by a sort), the rest zero."""
    out = torch.zeros_like(rows)
    for i, row in enumerate(rows):
        keep = sorted(range(len(row)), key=lambda j: -abs(float(row[j])))[:k]
        out[i, keep] = row[keep]
    return out


def two_bit(rows: torch.Tensor, k: int) -> torch.Tensor:
    """Each row's kept values as sign times the mean magnitude of their bin (above the
    mean magnitude of the kept, or not)."""
    out = torch.zeros_like(rows)
    for i, row in enumerate(rows):
        kept = [j for j in range(len(row)) if row[j] != 0] if k < len(row) else list(range(len(row)))
        mags = row[kept].abs()
        high = mags > mags.mean()
        for j, bit in zip(kept, high):
            level = mags[high == bit].mean()
            out[i, j] = torch.sign(row[j]) * level
    return out


def chunked(values: torch.Tensor, chunk: int, k: int, bits: str) -> torch.Tensor:
    rows = values.reshape(-1, chunk)
    kept = topk_rows(rows, k)
    return (two_bit(kept, k) if bits == "2bit" else kept).reshape(-1)


# -- SparseLoCo ----------------------------------------------------------------------------
def sparseloco(period: int, alpha: float, beta: float, chunk: int, k: int, bits: str,
               leader_pull: float | None = None) -> list[list[torch.Tensor]]:
    """Every rank's flat state after every step (the leader: rank 0, the lowest loss)."""
    theta = flat(start())
    x = [theta.clone() for _ in range(WORLD)]
    e = [torch.zeros_like(theta) for _ in range(WORLD)]
    out: list[list[torch.Tensor]] = [[] for _ in range(WORLD)]
    for step in range(1, STEPS + 1):
        for r in range(WORLD):
            x[r] = x[r] - LR * flat(grads(r))
        if step % period == 0:
            sent = []
            for r in range(WORLD):
                e[r] = beta * e[r] + (theta - x[r])
                c = chunked(e[r], chunk, k, bits)
                e[r] = e[r] - c
                sent.append(c)
            leader = theta - sent[0]  # the leader's state as its message carried it
            theta = theta - alpha * (sent[0] + sent[1]) / WORLD
            if leader_pull is not None:
                theta = theta + leader_pull * (leader - theta)
            x = [theta.clone() for _ in range(WORLD)]
        for r in range(WORLD):
            out[r].append(x[r].clone())
    return out


# -- DeMo ----------------------------------------------------------------------------------
def dct(n: int) -> torch.Tensor:
    """The orthonormal DCT-II matrix from its formula."""
    d = torch.zeros(n, n, dtype=torch.float64)
    for k in range(n):
        for i in range(n):
            c = math.sqrt(1 / n) if k == 0 else math.sqrt(2 / n)
            d[k, i] = c * math.cos(math.pi * (2 * i + 1) * k / (2 * n))
    return d.float()


def blocks_of(t: torch.Tensor, size: int) -> tuple[list[torch.Tensor], Callable[[list[torch.Tensor]], torch.Tensor]]:
    """A tensor's DCT blocks (1-D: chunks; 2-D: blocks, each side the largest divisor up
    to ``size``), and the inverse from such blocks."""
    if t.dim() == 1:
        c = max(d for d in range(1, size + 1) if t.numel() % d == 0)
        D = dct(c)
        pieces = [D @ t[i:i + c] for i in range(0, t.numel(), c)]
        return pieces, lambda bs: torch.cat([D.T @ b for b in bs])
    (n1, n2) = t.shape
    c1 = max(d for d in range(1, size + 1) if n1 % d == 0)
    c2 = max(d for d in range(1, size + 1) if n2 % d == 0)
    D1, D2 = dct(c1), dct(c2)
    spots = [(i, j) for i in range(0, n1, c1) for j in range(0, n2, c2)]
    pieces = [D1 @ t[i:i + c1, j:j + c2] @ D2.T for i, j in spots]

    def back(bs: list[torch.Tensor]) -> torch.Tensor:
        out = torch.zeros_like(t)
        for (i, j), b in zip(spots, bs):
            out[i:i + c1, j:j + c2] = D1.T @ b @ D2
        return out
    return pieces, back


def demo(decay: float, k: int, size: int, wd: float, overlap: int) -> list[list[torch.Tensor]]:
    x = start()
    m = [[torch.zeros(s) for s in SHAPES] for _ in range(WORLD)]
    out: list[list[torch.Tensor]] = [[] for _ in range(WORLD)]
    pending = None
    for _ in range(STEPS):
        total = None
        for r in range(WORLD):
            kept_all = []
            for i, g in enumerate(grads(r)):
                m[r][i] = decay * m[r][i] + LR * g
                pieces, back = blocks_of(m[r][i], size)
                kept = [topk_rows(p.reshape(1, -1), min(k, p.numel())).reshape(p.shape)
                        for p in pieces]
                m[r][i] = m[r][i] - back(kept)
                kept_all.append(kept)
            total = kept_all if total is None else [[a + b for a, b in zip(ta, tb)]
                                                    for ta, tb in zip(total, kept_all)]
        mean = [blocks_of(t, size)[1]([b / WORLD for b in bs]) for t, bs in zip(x, total)]
        update, pending = (pending, mean) if overlap else (mean, None)
        if update is not None:
            x = [v - LR * (torch.sign(q) + wd * v) for v, q in zip(x, update)]
        for r in range(WORLD):
            out[r].append(flat(x))
    return out


# -- the worker and the checks ---------------------------------------------------------------
class Pair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w, m = start()
        self.w = torch.nn.Parameter(w)
        self.m = torch.nn.Parameter(m)


def worker(info: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Steps of ``spec["method"]`` with each rank's constant gradients; the flat state
    after every step."""
    import lsgd
    from lsgd.optim import MuonAdamW

    model = Pair()
    if spec["method"] == "muloco":
        opt: torch.optim.Optimizer = MuonAdamW(model, lr=LR, weight_decay=0.0)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=LR, weight_decay=spec.get("wd", 0.0))
    strategy = lsgd.make_strategy(spec["method"], model, opt, **spec["kwargs"])
    states = []
    for _ in range(STEPS):
        for p, g in zip(model.parameters(), grads(info.rank)):
            p.grad = g.clone()
        strategy.step(torch.tensor(float(info.rank)))
        states.append(flat([p.detach() for p in model.parameters()]).clone())
    return {"x": states}


def check(expected: Callable[[], list[list[torch.Tensor]]]
          ) -> Callable[[list[dict[str, Any]]], None]:
    def run(results: list[dict[str, Any]]) -> None:
        want = expected()
        for r, res in enumerate(results):
            for t, (got, ref) in enumerate(zip(res["x"], want[r]), start=1):
                assert torch.allclose(got, ref, rtol=0, atol=2e-6), (
                    f"rank {r} after step {t}: {(got - ref).abs().max()}")
    return run


def muloco_reference(period: int, chunk: int) -> list[list[torch.Tensor]]:
    """MuLoCo: each rank's inner steps by lsgd.optim.MuonAdamW (torch's Muon), then the
    2-bit error-corrected pseudo-gradients and DiLoCo's outer Nesterov step by hand."""
    from lsgd.optim import MuonAdamW

    models = [Pair() for _ in range(WORLD)]
    opts = [MuonAdamW(model, lr=LR, weight_decay=0.0) for model in models]
    theta, v = flat(start()), torch.zeros(32)
    e = [torch.zeros(32) for _ in range(WORLD)]
    out: list[list[torch.Tensor]] = [[] for _ in range(WORLD)]
    for step in range(1, STEPS + 1):
        for r, (model, opt) in enumerate(zip(models, opts)):
            for p, g in zip(model.parameters(), grads(r)):
                p.grad = g.clone()
            opt.step()
        if step % period == 0:
            sent = []
            for r, model in enumerate(models):
                u = theta - flat([p.detach() for p in model.parameters()]) + e[r]
                c = chunked(u, chunk, chunk, "2bit")
                e[r] = u - c
                sent.append(c)
            delta = (sent[0] + sent[1]) / WORLD
            v = 0.9 * v + delta
            theta = theta - 0.7 * (delta + 0.9 * v)
            for model in models:
                with torch.no_grad():
                    for p, t in zip(model.parameters(), unflat(theta)):
                        p.copy_(t)
        for r, model in enumerate(models):
            out[r].append(flat([p.detach() for p in model.parameters()]).clone())
    return out


def _case(method: str, kwargs: dict[str, Any], expected: Callable[[], Any], **extra: Any
          ) -> tuple[int, int, str, dict[str, Any], Callable[[list[dict[str, Any]]], None]]:
    return (WORLD, 1, "sparse_scripted", {"method": method, "kwargs": kwargs, **extra},
            check(expected))


SPARSE_CASES = {
    "sparseloco_float32": _case("sparseloco", dict(period=2, outer_lr=0.75, feedback_decay=0.5,
                                                   density=0.25, chunk=8, values="float32"),
                                lambda: sparseloco(2, 0.75, 0.5, 8, 2, "float32")),
    "sparseloco_2bit": _case("sparseloco", dict(period=2, outer_lr=1.0, feedback_decay=0.95,
                                                density=0.5, chunk=8),
                             lambda: sparseloco(2, 1.0, 0.95, 8, 4, "2bit")),
    "sparseloco_leader_pull": _case(
        "sparseloco", dict(period=4, outer_lr=1.0, feedback_decay=0.9, density=0.25, chunk=8,
                           values="float32", leader="pull", leader_pull=0.5),
        lambda: sparseloco(4, 1.0, 0.9, 8, 2, "float32", leader_pull=0.5)),
    "demo": _case("demo", dict(decay=0.9, topk=2, chunk=4), lambda: demo(0.9, 2, 4, 0.0, 0)),
    "demo_overlap": _case("demo", dict(decay=0.5, topk=3, chunk=4, overlap=1),
                          lambda: demo(0.5, 3, 4, 0.01, 1), wd=0.01),
    "muloco": _case("muloco", dict(period=2, chunk=8), lambda: muloco_reference(2, 8)),
}
