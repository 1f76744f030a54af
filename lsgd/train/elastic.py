"""One elastic worker (torchft): trains ``lsgd train``'s model and data for a fixed
number of steps while workers leave and return (:mod:`lsgd.strategies.elastic`).

:func:`elastic_worker` is what :func:`lsgd.launcher.elastic.launch_elastic` runs
in every slot: the dataset, model (the same initial model on every worker,
from the seed), inner optimizer and strategy of ``lsgd train``'s configuration,
with an :class:`~lsgd.comm.elastic.ElasticCommunicator`. Worker ``slot`` reads
its own shard of each epoch; its batch is chosen by its step count, so a
joining worker, which takes the job's step count, goes on with the job's next
batch. Faults for tests and benchmarks, each ``(kind, slot, step)``, on a
worker's first attempt only: ``kill`` (SIGKILL before that step, as ``lsgd
train --fault``) and ``hang`` (sleep for ``hang_seconds`` before it, its
heartbeats going on); ``slot`` may be ``"leader"``: the worker that is the
leader elected last at that step (LSGD).

It returns the worker's record: its step count after each step with the time
(``trace``), its rounds, heals, failed rounds and the bytes it sent, received
and received in heals, and the test accuracy of the center (the average of
the members' models, one all-reduce in a last round, ``"eval"`` traffic; the
worker's own model if that round fails).
"""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Any

ATTEMPT = "TORCHELASTIC_RESTART_COUNT"


def elastic_worker(info: Any, slot: int, slots: int, lighthouse: str,
                   settings: dict[str, Any]) -> dict[str, Any]:
    """Train worker ``slot`` of ``slots`` until its step count reaches ``settings["steps"]``.

    ``settings``: the :class:`~lsgd.train.config.TrainConfig` fields under
    ``"config"``, ``"steps"``, ``"timeout"`` (seconds per collective),
    ``"faults"`` (a list of ``(kind, slot, step)``), ``"hang_seconds"``,
    ``"t0"`` (the job's start, :func:`time.time`).
    """
    import torch
    from torch.nn import functional as F

    from lsgd import data as datasets
    from lsgd.comm.elastic import ElasticCommunicator
    from lsgd.models import build_model
    from lsgd.train.build import Source, load_data, make_optimizer, steps_per_epoch, strategy_knobs
    from lsgd.train.config import make_config
    from lsgd.train.evaluate import evaluate

    import lsgd

    attempt = int(os.environ.get(ATTEMPT, "0"))
    t0 = float(settings.get("t0", time.time()))
    cfg = make_config(dict(settings["config"], workers=slots, backend="processes"))
    comm = ElasticCommunicator(slot, slots, lighthouse=lighthouse,
                               timeout=float(settings.get("timeout", 30.0)))
    source = Source(load_data(cfg), cfg, torch.device("cpu"))
    torch.manual_seed(cfg.seed)  # the same initial model on every worker
    model = build_model(cfg.model, source.input_shape(), source.data.classes)
    optimizer = make_optimizer(cfg, model)
    strategy = lsgd.make_strategy(cfg.method, model, optimizer, comm=comm,
                                  **strategy_knobs(cfg))
    generator = torch.Generator().manual_seed(cfg.seed * 7919 + 10_000 + slot + 101 * attempt)
    per_epoch = steps_per_epoch(cfg, source.n_train)
    faults = [tuple(fault) for fault in settings.get("faults", [])] if attempt == 0 else []
    trace: list[tuple[float, int]] = []
    started = time.time() - t0
    order, epoch = None, -1
    join_gap: float | None = None
    while strategy.steps < settings["steps"]:
        step = strategy.steps
        for kind, who, at in faults:
            if at == step and who in (slot, "leader" if _leads(strategy, slot) else None):
                if kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(float(settings.get("hang_seconds", 10.0)))
        if step // per_epoch != epoch:
            epoch = step // per_epoch
            order = datasets.shard(source.n_train, slot, slots, epoch, cfg.seed)
        batch = step % per_epoch
        assert order is not None
        x, y = source.train_batch(order[batch * cfg.batch_size:(batch + 1) * cfg.batch_size],
                                  generator)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        strategy.step(loss)
        trace.append((time.time() - t0, strategy.steps))
        if join_gap is None and comm.heals:
            join_gap = _gap_to_target(strategy)
    center = _center(strategy, comm)
    _, correct, count = evaluate(center, source)
    report = strategy.report()
    result = {"slot": slot, "attempt": attempt, "started": started, "trace": trace,
              "steps": strategy.steps, "rounds": report.rounds, "resets": report.resets,
              "heals": comm.heals, "failed_rounds": comm.failed_rounds,
              "committed_rounds": comm.committed_rounds(),
              "bytes_sent": report.bytes_sent, "bytes_received": report.bytes_received,
              "join_bytes": comm.stats("join").bytes_received,
              "accuracy": correct / count, "join_gap": join_gap,
              "leader_history": list(getattr(strategy, "leader_history", []))}
    comm.close()
    return result


def _center(strategy: Any, comm: Any) -> Any:
    """The average of the members' models after the last step, from a last round."""
    import copy

    from lsgd.strategies.elastic import run_round
    from lsgd.strategies.state import on_state_

    replica = copy.deepcopy(strategy.module)
    done: list[bool] = []

    def body() -> None:
        with comm.category("eval"):
            on_state_(replica, lambda buffer: comm.all_reduce_(buffer, op="mean"))
        done.append(True)

    run_round(strategy, body)
    return replica if done else strategy.module


def _gap_to_target(strategy: Any) -> float:
    """After joining: the largest difference between the worker's state and what the
    joining round reset it to (LSGD: the leader's state; DiLoCo: the global
    parameters); NaN for local SGD, whose target (the mean) no worker keeps."""
    if hasattr(strategy, "levels"):
        target = strategy.levels[-1].snapshot.views
    elif hasattr(strategy, "global_state"):
        target = strategy.global_state.views
    else:
        return float("nan")
    gaps = [float((a - b).abs().max()) for a, b in zip(strategy._state, target) if a.numel()]
    return float("nan") if any(math.isnan(g) for g in gaps) else max(gaps, default=0.0)


def _leads(strategy: Any, slot: int) -> bool:
    """Whether worker ``slot`` is the leader elected last (LSGD; never for the others)."""
    return getattr(strategy, "leader_rank", None) == slot
