"""Worker functions of the replica tests, run in the simulator and as gloo processes
(module-level, so that spawned worker processes can import them)."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

import lsgd
from lsgd.models.gpt import GPT
from lsgd.topology import complete

VOCAB, CONTEXT, WINDOWS = 32, 8, 2
STEPS, PERIOD = 9, 3
#: method -> knobs: each kind of round, blocking and hidden, float32 and int8.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "diloco": ("diloco", {"period": PERIOD, "outer_lr": 0.7}),
    "local-sgd": ("local-sgd", {"period": PERIOD}),
    "lsgd": ("lsgd", {"period": PERIOD, "pull": 0.5, "scope": 0.1}),
    "diloco-int8": ("diloco", {"period": PERIOD, "overlap": 1, "compress": "int8"}),
    "lsgd-int8": ("lsgd", {"period": PERIOD, "pull": 0.5, "overlap": 1, "compress": "int8"}),
    "diloco-streaming-int8": ("diloco", {"period": 4, "fragments": 2, "overlap": 1,
                                         "compress": "int8", "error_feedback": True}),
    "lsgd-fragments": ("lsgd", {"period": 4, "pull": 0.5, "fragments": 2, "overlap": 1}),
    "al-dsgd": ("al-dsgd", {"topology": "complete", "period": PERIOD}),
    "lsgd-bf16": ("lsgd", {"period": PERIOD, "pull": 0.5, "compress": "bf16"}),
    "diloco-eager": ("diloco", {"period": PERIOD, "outer": "eager"}),
    "diloco-eager-int8": ("diloco", {"period": 4, "fragments": 2, "outer": "eager",
                                     "compress": "int8", "error_feedback": True}),
}


def gpt() -> GPT:
    """A GPT without dropout (the same one everywhere: seeded), of 4,000-odd values."""
    torch.manual_seed(0)
    return GPT(VOCAB, CONTEXT, 1, 16, 2)


def windows(step: int, process: int) -> torch.Tensor:
    """The windows process ``process`` reads at ``step`` (the same whoever asks)."""
    generator = torch.Generator().manual_seed(1000 * step + process)
    return torch.randint(0, VOCAB, (WINDOWS, CONTEXT + 1), generator=generator)


def train(info: lsgd.WorkerInfo, variants: list[str], per_replica: int,
          replica: str) -> dict[str, Any]:
    """Each variant for :data:`STEPS` steps. With ``replica="node"`` each process reads its
    own windows; with ``"process"`` each process stands for a replica of
    ``per_replica`` processes and reads all their windows at once. Returns, per variant,
    the final parameters and the report."""
    out: dict[str, Any] = {}
    for name in variants:
        method, knobs = VARIANTS[name]
        if knobs.get("topology") == "complete":  # a graph over the replicas
            knobs = {**knobs, "topology": complete(lsgd.get_communicator().world_size)}
        model = gpt()
        opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        strategy = lsgd.make_strategy(method, model, opt, **knobs)
        for step in range(STEPS):
            if replica == "node":
                batch = windows(step, info.rank)
            else:
                batch = torch.cat([windows(step, info.rank * per_replica + k)
                                   for k in range(per_replica)])
            logits = strategy.model(batch[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            strategy.step(loss)
        strategy.settle()
        out[name] = {"params": [p.detach().clone() for p in model.parameters()],
                     "report": strategy.report()}
    return out


def parts(info: lsgd.WorkerInfo) -> dict[str, Any]:
    """Every collective of a replica communicator on tensors of awkward sizes (0-d, fewer
    values than processes, not a multiple of anything): what comes back."""
    comm = lsgd.get_communicator()
    mine, replica = info.rank, comm.rank
    got: dict[str, Any] = {}
    for numel in (0, 1, 7, 3 * 2 * 256 + 5, 9000):
        shape = () if numel == 0 else (numel,)
        base = torch.arange(max(numel, 1), dtype=torch.float32).reshape(shape)
        # The replica's tensor: the same on its processes (what a replica's state is).
        total = comm.all_reduce_(base * (replica + 1), op="sum")
        got[f"sum{numel}"] = total
        got[f"broadcast{numel}"] = comm.broadcast_(base * (replica + 1), src=1)
        got[f"int8 {numel}"] = comm.all_reduce_(base * (replica + 1), op="mean", codec="int8")
        # A per-process value: a replica gathers its processes' mean.
        got[f"gather{numel}"] = comm.all_gather(base + mine)
        handle = comm.start_broadcast(started := base * (replica + 2), src=0)
        handle.wait()
        got[f"started{numel}"] = started
    got["ints"] = comm.all_gather(torch.tensor([replica, 7], dtype=torch.int64))
    peer = 1 - replica
    got["exchange"] = comm.exchange_many(torch.arange(600.0) * (replica + 1), [peer])[0]
    return got
