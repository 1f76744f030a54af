"""A real peer on the same links: torchft's DiLoCo and Streaming DiLoCo as benchmark methods.

``torchft-diloco`` and ``torchft-streaming`` train with torchft 0.2.0 (``pip install
'lsgd[torchft]'``) what ``lsgd train`` trains for DiLoCo (the same model, initialization,
data, inner and outer optimizers, period as ``sync_every`` and time budget) on the same
nodes behind the same shaped links, one process per node, and leave the records of a
``lsgd train`` run, which the benchmarks rank and ``--reuse`` reads back.

Each node is a torchft replica group of one process with a TCPStore on the node's
address; rank 0 also runs the lighthouse; heals go over the process group
(``PGTransport``). lsgd's communicator only evaluates the center, agrees on the clock and
starts and stops the nodes together. What differs from lsgd's DiLoCo (no quantized
all-reduce on a CPU, fragments as whole layers, a quorum before each synchronisation):
docs/studies.md ("Ahead of the peer").
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import tomli_w
import torch
import torch.distributed as dist

import lsgd
from lsgd.bench.common import MissingRecord, read_record
from lsgd.links.netns import node_address
from lsgd.train.evaluate import model_copy
from lsgd.train.outputs import read_csv
from lsgd.train.loop import WorkerLoop

METHODS = {"torchft-diloco": (1, 0), "torchft-streaming": (2, 2)}  # (fragments, delay)
#: The settings of ``lsgd train`` a torchft run takes as lsgd's runs do; others (a backend,
#: a modeled step time) do not apply to it.
HONOURED = ("context", "layers", "width", "heads", "eval_tokens", "data_dir", "optimizer",
            "lr", "momentum", "nesterov", "weight_decay", "schedule", "warmup_epochs",
            "outer_lr", "outer_momentum", "target")
LIGHTHOUSE_PORT = 29510  # inside node 0's namespace only


def available() -> bool:
    """Whether torchft can be imported here."""
    return importlib.util.find_spec("torchft") is not None


def train(run: Path, *, method: str, workers: int, groups: int, link: str | None,
          model: str, dataset: str, batch_size: int, minutes: float, eval_every: str,
          seed: int, period: int = 16, reuse: bool | str = False,
          **others: Any) -> dict[str, Any]:
    """One torchft run into ``run``; its summary with the metrics rows under ``"rows"``
    (as :func:`lsgd.bench.common.train`). ``reuse`` reads back a finished run of exactly
    these settings; of ``others`` (settings of ``lsgd train``) those in :data:`HONOURED` apply."""
    fragments, delay = METHODS[method]
    settings = {"engine": "torchft", "method": method, "workers": workers, "groups": groups,
                "link": link or "", "model": model, "dataset": dataset,
                "batch_size": batch_size, "minutes": minutes, "eval_every": eval_every,
                "seed": seed, "period": period, "fragments": fragments, "delay": delay,
                **{key: others[key] for key in HONOURED if others.get(key) is not None}}
    record = read_record(run) if reuse else None
    if record is not None and record[0] == settings:
        return record[1] | {"rows": read_csv(run / "metrics.csv"), "run": str(run), "reused": True}
    if reuse == "only":
        raise MissingRecord(f"no finished torchft run with these settings in {run}")
    if not available():
        raise RuntimeError(f"{method} needs torchft: pip install 'lsgd[torchft]'")
    if workers != groups:
        raise ValueError(f"{method}: one worker per node (a replica group of one process)")
    run.mkdir(parents=True, exist_ok=True)
    summary = lsgd.launch(_worker, workers, groups, args=(settings, str(run), time.time()),
                          timeout=300.0, link=link or None)[0]
    assert summary is not None, "rank 0 returns the run's summary"
    (run / "config.toml").write_text(tomli_w.dumps(settings))
    return summary | {"rows": read_csv(run / "metrics.csv"), "run": str(run)}


def _fragments(model: Any, count: int) -> list[Any]:
    """``model``'s layers with parameters, in order, in ``count`` groups of about equal
    size (torchft synchronises whole modules)."""
    layers = [m for m in model.modules()
              if not list(m.children()) and any(True for _ in m.parameters())]
    sizes = [sum(p.numel() for p in m.parameters()) for m in layers]
    groups: list[list[torch.nn.Module]] = [[] for _ in range(count)]
    total, done = sum(sizes), 0
    for layer, size in zip(layers, sizes):
        index = min(count - 1, int(count * done / total))
        groups[index].append(layer)
        done += size
    return [torch.nn.ModuleList(group) for group in groups if group]


class _TorchftDiLoCo:
    """torchft's Manager and (Streaming) DiLoCo behind the methods of a
    :class:`~lsgd.Strategy` that :class:`~lsgd.train.loop.WorkerLoop` calls."""

    asynchronous = False

    def __init__(self, loop: _Peer) -> None:
        model, comm, settings, group = loop.model, loop.comm, loop.settings, loop.group
        address = node_address(group) if settings["link"] else "127.0.0.1"
        os.environ.setdefault("RUST_LOG", "error")  # torchft's servers log every quorum otherwise
        from torchft._torchft import LighthouseServer
        from torchft.checkpointing.pg_transport import PGTransport
        from torchft.local_sgd import DiLoCo
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        self.model, self.comm, self.rank, self.world_size = model, comm, comm.rank, comm.world_size
        self.parts, self.steps = _fragments(model, settings["fragments"]), 0
        self.fragment_bytes = [sum(p.numel() * p.element_size() for p in part.parameters())
                               for part in self.parts]
        outers = [torch.optim.SGD(part.parameters(), lr=loop.cfg.options.outer_lr, nesterov=True,
                                  momentum=loop.cfg.options.outer_momentum) for part in self.parts]
        self.lighthouse = (LighthouseServer(bind=f"[::]:{LIGHTHOUSE_PORT}",
                                            min_replicas=self.world_size)
                           if self.rank == 0 else None)
        comm.barrier()  # the lighthouse listens before anyone asks it for a quorum
        self.store = dist.TCPStore(host_name=address, port=0, is_master=True,
                                   wait_for_workers=False)
        patience = datetime.timedelta(seconds=300)
        pg = ProcessGroupGloo(timeout=patience)
        self.manager = Manager(
            pg=pg, min_replica_size=self.world_size, use_async_quorum=False,
            load_state_dict=lambda state: model.load_state_dict(state["model"]),
            state_dict=lambda: {"model": model.state_dict()}, replica_id=f"node{group}",
            store_addr=address, store_port=self.store.port, rank=0, world_size=1,
            lighthouse_addr=f"http://{node_address(0) if settings['link'] else address}:"
                            f"{LIGHTHOUSE_PORT}",
            hostname=address, timeout=patience, quorum_timeout=patience,
            checkpoint_transport=PGTransport(pg, timeout=patience, device=torch.device("cpu")),
            connect_timeout=datetime.timedelta(seconds=60), init_sync=False)
        self.inner = loop.opt
        self.diloco = DiLoCo(self.manager, self.parts, self.inner, outers,
                             sync_every=settings["period"], backup_device=torch.device("cpu"),
                             pin_memory=False, fragment_sync_delay=settings["delay"])
        self.diloco.__enter__()  # its hooks on the inner optimizer, until close()

    def step(self, loss: torch.Tensor) -> None:
        """The inner step; torchft's hooks hold the quorum and start the all-reduce when due."""
        self.inner.step()
        self.steps += 1

    def settle(self) -> None:
        for fragment in self.diloco._fragments:
            for work in fragment._allreduce_work:
                work.wait()

    def center(self) -> Any:
        """The workers' mean model (lsgd's communicator)."""
        return model_copy(self.comm, self.model, None)

    def report(self) -> lsgd.Report:
        """Steps, synchronisations and the bytes of their ring all-reduces."""
        syncs = self.manager.current_step()  # committed synchronisations, one fragment each
        world, sizes = self.world_size, self.fragment_bytes
        sent = sum(2 * (world - 1) * sizes[s % len(sizes)] / world for s in range(syncs))
        return lsgd.Report(method="diloco", rank=self.rank, world_size=world, groups=world,
                           steps=self.steps, rounds=syncs, asynchronous=False,
                           total_steps=self.steps * world, wait_seconds=0.0, bytes_sent=sent,
                           bytes_received=sent, comm_seconds=0.0, comm_calls=0,
                           eval_bytes_sent=0, eval_bytes_received=0)

    def close(self) -> None:
        """Stop together: torchft's hooks, its manager and the lighthouse."""
        self.diloco.__exit__(None, None, None)
        self.comm.barrier()
        self.manager.shutdown(wait=False)
        if self.lighthouse is not None:
            self.lighthouse.shutdown()


class _Peer(WorkerLoop):
    """One replica group: lsgd's task, model, batches and loop; torchft's DiLoCo."""

    def __init__(self, info: Any, settings: dict[str, Any], run: str, started: float) -> None:
        from lsgd.train.config import make_config

        self.settings, self.group = settings, info.group
        comm = lsgd.get_communicator()
        shared = ("model", "dataset", "batch_size", "seed", "minutes", "eval_every", *HONOURED)
        cfg = make_config({"method": "diloco", "outer_lr": 0.7, "workers": comm.world_size,
                           "backend": "processes", "out": run, "quiet": True,
                           **{key: settings[key] for key in shared if key in settings}})
        super().__init__(cfg, comm, torch.device("cpu"), started=started)

    def make_strategy(self) -> _TorchftDiLoCo:  # type: ignore[override]
        return _TorchftDiLoCo(self)

    def finish(self) -> dict[str, Any] | None:
        """Stop torchft; rank 0 writes the summary."""
        self.strategy.close()
        return self.write_summary(method=self.settings["method"], engine="torchft",
                                  comm_seconds_per_worker=None) if self.writes() else None


def _worker(info: Any, settings: dict[str, Any], run: str,
            started: float) -> dict[str, Any] | None:
    """One replica group of the run into ``run``; rank 0 returns the summary."""
    return _Peer(info, settings, run, started).run()
