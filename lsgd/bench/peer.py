"""A real peer on the same links: torchft's DiLoCo and Streaming DiLoCo as benchmark methods.

``torchft-diloco`` and ``torchft-streaming`` train with torchft (the optional
extra ``pip install 'lsgd[torchft]'``, torchft 0.2.0) what ``lsgd train`` trains
for DiLoCo: the same model, initialization, shards, batches, augmentation,
inner optimizer (SGD, Nesterov 0.9, weight decay), outer optimizer (SGD, lr
0.7, Nesterov 0.9), period (torchft's ``sync_every``) and time budget, on the
same nodes behind the same shaped links, started by lsgd's launcher (one
process per node). The runs leave the records a ``lsgd train`` run leaves
(``config.toml``, ``metrics.csv``, ``summary.json``), so ``lsgd bench
time-to-accuracy`` ranks them beside lsgd's own methods and ``--reuse`` reads
them back.

Each node is a torchft replica group of one process with a TCPStore of its own
on the node's address; rank 0 also runs torchft's lighthouse, which forms the
quorum (every replica: ``min_replica_size = W``) at each synchronisation.
Its manager advertises the node's address (``hostname=``) and heals over the
process group (torchft's ``PGTransport``), so nothing advertises the machine's
host name or serves the model over HTTP. torchft's DiLoCo synchronises through its own
process group; lsgd's communicator (the launcher's process group) is used only
to evaluate the center, to agree on the training clock, as lsgd's runs do,
and to start and stop together.

Where it cannot be made the same, and what was done:

* quantized all-reduces (``should_quantize``) need Triton and a GPU: on a
  CPU torchft sends float32, so there is no torchft counterpart to lsgd's
  int8 rounds;
* fragments are whole layers (torchft's ``model_fragments``), split into
  ``F`` groups of about equal size: for CNN7 in 2, the first two
  convolutions (59% of the values) and the rest, where lsgd's fragments are
  equal halves of the flat state;
* torchft all-reduces each parameter tensor in turn and holds a quorum (a
  round trip to the lighthouse) before each synchronisation;
* torchft counts no bytes: the bytes reported are those of its ring
  all-reduces (``2 (W - 1) / W`` of each synchronised fragment per worker);
* before each evaluation the worker waits for an all-reduce in flight, as
  lsgd's workers do (``Strategy.settle``), so no transfer runs while the
  training clock is stopped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from pathlib import Path
from typing import Any

import tomli_w

from lsgd.train.outputs import METRIC_FIELDS, read_csv, write_csv, write_json

METHODS = {"torchft-diloco": (1, 0), "torchft-streaming": (2, 2)}  # (fragments, delay)
#: The settings of ``lsgd train`` a torchft run takes as lsgd's runs do (the task's
#: sizes, the inner and outer optimizers, the schedule, the target); others (a
#: backend, a modeled step time) do not apply to it and are left out.
HONOURED = ("context", "layers", "width", "heads", "eval_tokens", "data_dir", "optimizer",
            "lr", "momentum", "nesterov", "weight_decay", "schedule", "warmup_epochs",
            "outer_lr", "outer_momentum", "target")
LIGHTHOUSE_PORT = 29510  # inside node 0's namespace only
CLOCK_EVERY = 4  # steps between broadcasts of rank 0's training clock


def available() -> bool:
    """Whether torchft can be imported here."""
    return importlib.util.find_spec("torchft") is not None


def train(run: Path, *, method: str, workers: int, groups: int, link: str | None,
          model: str, dataset: str, batch_size: int, minutes: float, eval_every: str,
          seed: int, period: int = 16, reuse: bool | str = False,
          **others: Any) -> dict[str, Any]:
    """One torchft run into ``run``; its summary with the metrics rows under ``"rows"``
    (as :func:`lsgd.bench.common.train`). ``reuse`` reads a finished run back.
    ``others``: settings of ``lsgd train``, of which those in :data:`HONOURED` apply."""
    from lsgd.bench.common import MissingRecord

    fragments, delay = METHODS[method]
    settings = {"engine": "torchft", "method": method, "workers": workers, "groups": groups,
                "link": link or "", "model": model, "dataset": dataset,
                "batch_size": batch_size, "minutes": minutes, "eval_every": eval_every,
                "seed": seed, "period": period, "fragments": fragments, "delay": delay,
                **{key: others[key] for key in HONOURED if others.get(key) is not None}}
    done = _finished(run, settings) if reuse else None
    if done is not None:
        return done | {"rows": read_csv(run / "metrics.csv"), "run": str(run), "reused": True}
    if reuse == "only":
        raise MissingRecord(f"no finished torchft run with these settings in {run}")
    if not available():
        raise RuntimeError(f"{method} needs torchft: pip install 'lsgd[torchft]'")
    import lsgd

    if workers != groups:
        raise ValueError(f"{method}: one worker per node (a replica group of one process)")
    start = time.perf_counter()
    results = lsgd.launch(_worker, workers, groups, args=(settings,), timeout=300.0,
                          link=link or None)
    first = results[0]
    assert first is not None, "rank 0 returns the run's rows"
    rows, totals = first["rows"], first["totals"]
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.toml").write_text(tomli_w.dumps(settings))
    write_csv(run / "metrics.csv", rows,
              METRIC_FIELDS + [key for key in rows[-1] if key not in METRIC_FIELDS])
    summary = {"method": method, "model": model, "dataset": dataset, "workers": workers,
               "groups": groups, "backend": "processes", "link": link,
               "link_kind": "shaped" if link else None, "engine": "torchft",
               "test_accuracy": rows[-1]["center_accuracy"],
               "test_loss": rows[-1]["center_loss"], **first["task"],
               "target": settings.get("target"), "reached_target": totals["reached"],
               "steps": totals["steps"],
               "train_seconds": totals["train_seconds"],
               "wall_seconds": time.perf_counter() - start,
               "bytes_sent_per_worker": totals["bytes"], "comm_seconds_per_worker": None,
               "rounds": totals["rounds"], "time_axis": "wall-clock seconds of training"}
    write_json(run / "summary.json", summary)
    return summary | {"rows": read_csv(run / "metrics.csv"), "run": str(run)}


def _finished(run: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of a finished run in ``run`` with exactly ``settings``, else None."""
    import tomllib

    try:
        stored = tomllib.loads((run / "config.toml").read_text())
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if stored == settings and (run / "metrics.csv").is_file() else None


def _fragments(model: Any, count: int) -> list[Any]:
    """``model``'s layers with parameters, in order, in ``count`` groups of about equal
    size (torchft synchronises whole modules)."""
    from torch import nn

    layers = [m for m in model.modules()
              if not list(m.children()) and any(True for _ in m.parameters())]
    sizes = [sum(p.numel() for p in m.parameters()) for m in layers]
    groups: list[list[nn.Module]] = [[] for _ in range(count)]
    total, done = sum(sizes), 0
    for layer, size in zip(layers, sizes):
        index = min(count - 1, int(count * done / total))
        groups[index].append(layer)
        done += size
    return [nn.ModuleList(group) for group in groups if group]


def _worker(info: Any, settings: dict[str, Any]) -> dict[str, Any] | None:
    """One replica group: lsgd's task and model, torchft's Manager and DiLoCo."""
    import datetime
    import os

    import torch
    import torch.distributed as dist

    import lsgd
    from lsgd.links.netns import node_address
    from lsgd.tasks import reaches
    from lsgd.train.build import build_model_of, make_optimizer, make_schedule, make_task
    from lsgd.train.config import make_config
    from lsgd.train.evaluate import gather_named

    address = node_address(info.group) if settings["link"] else "127.0.0.1"
    os.environ.setdefault("RUST_LOG", "error")  # torchft's servers log every quorum otherwise
    from torchft._torchft import LighthouseServer
    from torchft.local_sgd import DiLoCo
    from torchft.checkpointing.pg_transport import PGTransport
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    comm, rank, world = lsgd.get_communicator(), info.rank, info.world_size
    cfg = make_config({"method": "diloco", "model": settings["model"],
                       "dataset": settings["dataset"], "batch_size": settings["batch_size"],
                       "workers": world, "seed": settings["seed"], "backend": "processes",
                       "minutes": settings["minutes"], "eval_every": settings["eval_every"],
                       **{key: settings[key] for key in HONOURED if key in settings}})
    device = torch.device("cpu")
    task = make_task(cfg, device)
    model = build_model_of(cfg, task)  # as lsgd train: the same initial model everywhere
    inner = make_optimizer(cfg, model)
    torch.manual_seed(cfg.seed * 7919 + 1 + rank)
    generator = torch.Generator().manual_seed(cfg.seed * 7919 + 10_000 + rank)
    per_epoch = task.steps_per_epoch
    schedule = make_schedule(cfg, inner, per_epoch)
    parts = _fragments(model, settings["fragments"])
    outers = [torch.optim.SGD(part.parameters(), lr=cfg.outer_lr, momentum=cfg.outer_momentum,
                              nesterov=True) for part in parts]
    lighthouse = (LighthouseServer(bind=f"[::]:{LIGHTHOUSE_PORT}", min_replicas=world)
                  if rank == 0 else None)
    comm.barrier()  # the lighthouse listens before anyone asks it for a quorum
    store = dist.TCPStore(host_name=address, port=0, is_master=True, wait_for_workers=False)
    patience = datetime.timedelta(seconds=300)
    pg = ProcessGroupGloo(timeout=patience)
    manager = Manager(
        pg=pg, min_replica_size=world, use_async_quorum=False,
        load_state_dict=lambda state: model.load_state_dict(state["model"]),
        state_dict=lambda: {"model": model.state_dict()}, replica_id=f"node{info.group}",
        store_addr=address, store_port=store.port, rank=0, world_size=1,
        lighthouse_addr=f"http://{node_address(0) if settings['link'] else address}:"
                        f"{LIGHTHOUSE_PORT}",
        hostname=address, timeout=patience, quorum_timeout=patience,
        checkpoint_transport=PGTransport(pg, timeout=patience, device=device),
        connect_timeout=datetime.timedelta(seconds=60), init_sync=False)
    fragment_bytes = [sum(p.numel() * p.element_size() for p in part.parameters())
                      for part in parts]
    rows: list[dict[str, Any]] = []
    steps, seconds, shared = 0, 0.0, 0.0
    reached: dict[str, float] | None = None
    budget = 60 * settings["minutes"]
    kind, every = cfg.eval_interval()
    next_eval = every
    diloco = DiLoCo(manager, parts, inner, outers, sync_every=settings["period"],
                    backup_device=device, pin_memory=False,
                    fragment_sync_delay=settings["delay"])
    with diloco:
        while True:
            t0 = time.perf_counter()
            x, y = task.train_batch(rank, world, steps // per_epoch, steps % per_epoch,
                                    generator)
            schedule.at(steps / per_epoch, shared / 60)
            loss = task.loss(model(x), y)
            inner.zero_grad(set_to_none=True)
            loss.backward()
            inner.step()  # torchft's hooks: the quorum and the (started) all-reduce when due
            steps += 1
            seconds += time.perf_counter() - t0
            due = kind == "steps" and steps >= next_eval
            if steps % CLOCK_EVERY and not due:
                continue
            clock = torch.tensor([seconds], dtype=torch.float64)
            with comm.category("control"):
                comm.broadcast_(clock, src=0)
            shared = float(clock)
            due = due or (kind == "seconds" and shared >= next_eval)
            if not due and shared < budget:
                continue
            t1 = time.perf_counter()
            for fragment in diloco._fragments:  # nothing travels while the clock is stopped
                for work in fragment._allreduce_work:
                    work.wait()
            seconds += time.perf_counter() - t1
            rows.append(_evaluate(comm, model, task, rank, world, shared, steps, per_epoch,
                                  gather_named))
            schedule.observe(rows[-1]["center_loss"])
            while next_eval <= (steps if kind == "steps" else shared):
                next_eval += every
            value = rows[-1][task.column]
            if reached is None and cfg.target is not None and reaches(task.metric, value,
                                                                      cfg.target):
                reached = {"time": shared, "steps": float(steps), "value": value}
            if shared >= budget or reached is not None:
                break
    syncs = manager.current_step()  # committed synchronisations, one fragment each
    sent = sum(2 * (world - 1) * fragment_bytes[s % len(parts)] / world for s in range(syncs))
    comm.barrier()
    manager.shutdown(wait=False)
    if lighthouse is not None:
        lighthouse.shutdown()
    totals = {"steps": steps, "train_seconds": seconds, "bytes": sent, "rounds": syncs,
              "reached": reached}
    return {"rows": rows, "totals": totals, "task": task.summary(rows)} if rank == 0 else None


def _evaluate(comm: Any, model: Any, task: Any, rank: int, world: int, shared: float,
              steps: int, per_epoch: int, gather_named: Any) -> dict[str, Any]:
    """The center's loss and accuracy (its slice of the evaluation set on each worker)."""
    import copy

    from lsgd.strategies.state import on_state_

    center = copy.deepcopy(model)
    with comm.category("eval"):
        on_state_(center, lambda buffer: comm.all_reduce_(buffer, op="mean"))
    sums = task.evaluate(center, rank, world)
    every = gather_named(comm, {"loss": sums.loss, "correct": sums.correct,
                                "count": sums.count}, next(model.parameters()).device)
    total = float(every["count"].sum())
    return {"time": shared, "steps": float(steps), "epoch": steps / per_epoch,
            **task.columns("center", float(every["loss"].sum()) / total,
                           float(every["correct"].sum()) / total),
            "leader_rank": None, **task.columns("leader", math.nan, math.nan)}
