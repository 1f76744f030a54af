"""The study replicas-lab: what each kind of round puts on a node's real link, with a
node's processes as one replica (``node``) and as replicas of their own (``process``).

2 nodes of 2 processes behind links the kernel shapes (root and iproute2), a model of
about a million values, a round at every step. For each kind of round the bytes of a
round on each node's link are read from the kernel (``/proc/net/dev`` of the node's
``eth0``: headers and acknowledgements included) and from lsgd's own accounting
(``link_bytes_sent``, summed over the node's processes), over ``ROUNDS`` rounds after
a first one:

* ring all-reduce: DiLoCo, blocking, float32;
* chain broadcast: LSGD, blocking (``process``: multi-leader LSGD, a local round inside
  each node and a global round across at every step);
* int8 all-to-all and all-gather: DiLoCo with ``compress="int8"``;
* int8 broadcast: LSGD with ``compress="int8"``;
* top-k all-gather: DiLoCo with ``compress="topk"`` (2% of every chunk, 2-bit values);
* DCT all-gather: DeMo (its top 32 coefficients of every block), replicas of a process
  only (DeMo transforms each parameter whole).

It needs links the kernel shapes (root and iproute2):

    python studies/replica_lab.py --out records/replicas-lab
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result
from lsgd.train.errors import UsageError
from studies.common import link, script

NAME = "replicas-lab"
ROUNDS = 3
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "ring all-reduce": ("diloco", {"period": 1}),
    "chain broadcast": ("lsgd", {"period": 1}),
    "int8 all-to-all": ("diloco", {"period": 1, "compress": "int8"}),
    "int8 broadcast": ("lsgd", {"period": 1, "compress": "int8"}),
    "top-k all-gather": ("diloco", {"period": 1, "compress": "topk", "density": 0.02,
                                    "values": "2bit"}),
    "DCT all-gather": ("demo", {}),
}
#: The kinds whose method takes no replica of several processes.
PROCESS_ONLY = ("DCT all-gather",)
#: It trains no runs: neither seeds nor records of runs, a measurement on shaped links.
TRAINS = False
FLAGS = {"--link": {"type": link, "help": "the nodes' shaped link (default 100mbit)"}}


def _eth0() -> tuple[int, int]:
    """(received, sent) bytes of this network namespace's ``eth0`` so far."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "eth0":
            fields = counters.split()
            return int(fields[0]), int(fields[8])
    raise RuntimeError("no eth0 here: run on shaped nodes (link=...)")


def measure(info: Any, kind: str, width: int, rounds: int) -> dict[str, Any]:
    """One worker: the rounds of ``kind`` and what crossed its node's link meanwhile."""
    import lsgd

    method, knobs = KINDS[kind]
    if method == "lsgd" and lsgd.get_communicator().share[1] == 1:
        knobs = {**knobs, "global_period": 1}  # multi-leader: a global round every step
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(),
                                torch.nn.Linear(width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    strategy = lsgd.make_strategy(method, model, opt, **knobs)
    processes = lsgd.get_communicator().processes

    def step(k: int) -> None:
        x = torch.randn(8, width, generator=torch.Generator().manual_seed(k + 100 * info.rank))
        loss = strategy.model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)

    step(0)  # the first round (and the first election) off the books
    processes.barrier()
    kernel, ours = _eth0(), strategy.report().link_bytes_sent
    for k in range(1, rounds + 1):
        step(k)
    processes.barrier()
    after = _eth0()
    return {"rank": info.rank, "rx": after[0] - kernel[0], "tx": after[1] - kernel[1],
            "sent": strategy.report().link_bytes_sent - ours}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    import lsgd
    from lsgd.links.netns import LinkSetupError, shaped_links_possible

    rate = options.get("link") or "100mbit"
    try:
        shaped_links_possible(rate)
    except LinkSetupError as error:
        raise UsageError(f"replicas-lab needs shaped links: {error}") from None
    width, rounds = (128, 1) if quick else (1024, ROUNDS)
    rows, data = [], []
    for kind in KINDS:
        per_form = {}
        for form in ("process",) if kind in PROCESS_ONLY else ("process", "node"):
            results = lsgd.launch(measure, 4, groups=2, args=(kind, width, rounds),
                                  link=rate, replica=form, timeout=120)
            # Every process of a node reads the same eth0: take its first process's.
            node = [results[0], results[2]]
            per_form[form] = {
                "tx": sum(r["tx"] for r in node) / 2 / rounds,
                "rx": sum(r["rx"] for r in node) / 2 / rounds,
                "sent": sum(r["sent"] for r in results) / 2 / rounds}
            data.append({"kind": kind, "form": form, "results": results})
            print(f"  {kind}, {form}: {per_form[form]['tx'] / 1e6:.3f} MB sent per node "
                  "and round on its link", file=sys.stderr, flush=True)
        process, node = per_form["process"], per_form.get("node")
        rows.append([kind, process["tx"] / 1e6, node["tx"] / 1e6 if node else "-",
                     process["sent"] / 1e6, node["sent"] / 1e6 if node else "-",
                     node["tx"] / process["tx"] if node else "-"])
    values = sum(p.numel() for p in torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.Linear(width, 1)).parameters())
    notes = [f"2 nodes of 2 processes behind shaped {rate} links, a model of {values:,} "
             f"values ({4 * values / 1e6:.2f} MB in float32), a round at every step; per "
             f"node and round, the mean of {rounds} round(s) after a first one: MB its eth0 "
             "sent (the kernel's count, headers and acknowledgements included) and MB lsgd "
             "counted across its link. process: each process a replica (LSGD: multi-leader, "
             "the chain broadcast of its global round); node: the node's 2 processes one "
             "replica, each round's collective in 2 parts."]
    return Result(NAME, "What a round puts on a node's link: replicas of a process against "
                  "replicas of a node (2 nodes of 2 processes, shaped links)",
                  ["round", "kernel MB process", "kernel MB node", "lsgd MB process",
                   "lsgd MB node", "kernel node/process"], rows, notes,
                  {"link": rate, "width": width, "rounds": rounds, "runs": data})


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
