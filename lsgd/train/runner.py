"""From a configuration to a finished run: the settings resolved, checked, trained.

The workers run as W local processes (``--backend processes``, :func:`lsgd.launch`;
gloo on CPU, NCCL with one GPU each), as this process's worker of a ``torchrun`` job
(groups = nodes), or in the in-process simulator (``--backend threads``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from lsgd.train.errors import UsageError
from lsgd.train.config import TrainConfig, from_legacy, make_config
from lsgd.train.tomlfile import read_toml


def under_torchrun() -> bool:
    """Whether this process is a worker that torchrun started."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


#: What makes a run the run it is: resuming it with other values is a mistake.
RUN_IDENTITY = ("method", "model", "dataset", "workers", "groups", "replica")


def resolve(args: argparse.Namespace, siblings: tuple[str, ...] = ()) -> TrainConfig:
    """Defaults, then the resumed run's or --config's settings, then the command line;
    ``siblings``: the methods trained side by side with this one (their options given
    are not this one's mistakes)."""
    given = {k: v for k, v in vars(args).items()
             if k not in ("handler", "parser", "config", "command")}
    config = getattr(args, "config", None)
    from_file = _read_settings(Path(config), f"--config {config}: no such file") if config else {}
    settings: dict[str, Any] = {}
    if "resume" in given:
        run = given["resume"]
        saved = Path(run) / "config.toml"
        settings = _read_settings(saved, f"--resume {run}: no run there ({saved} is missing); "
                                  "give a run folder lsgd train wrote, or drop --resume to "
                                  "start a new run")
        settings.pop("dry_run", None)  # a resumed run is a dry run only if this command says so
        _check_same_run(run, settings, from_file, config, given)
        settings["out"] = run
    settings |= from_file | given
    settings = from_legacy(settings, str(settings.get("method", TrainConfig.method))) | given
    try:
        cfg = make_config(settings, siblings, lenient=set(settings) - set(given))
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from error
    return resolve_backend(resolve_replica(cfg))


def resolve_replica(cfg: TrainConfig) -> TrainConfig:
    """``--replica node`` with one worker per group is ``--replica process``: the same run,
    recorded as that (with a note)."""
    if cfg.replica == "node" and cfg.groups == cfg.workers:
        print(f"note: --replica node with one worker per group ({cfg.workers} workers, "
              f"{cfg.groups} groups) is --replica process: each process is its node's replica",
              file=sys.stderr)
        return dataclasses.replace(cfg, replica="process")
    return cfg


def resolve_backend(cfg: TrainConfig) -> TrainConfig:
    """``--backend auto``: worker processes, except where ``--link`` cannot be shaped on
    this machine; there the simulator's modeled link, with a note saying why."""
    if cfg.backend != "auto":
        return cfg
    backend = "processes"
    if cfg.link is not None and not under_torchrun():
        from lsgd.links.netns import LinkSetupError, shaped_links_possible

        try:
            shaped_links_possible(cfg.link)
        except LinkSetupError as error:
            backend = "threads"
            print(f"note: --backend auto: the link {cfg.link} is modeled on the simulator's "
                  f"clock, not shaped ({str(error).split(';')[0]})", file=sys.stderr)
    return dataclasses.replace(cfg, backend=backend)


def _read_settings(path: Path, missing: str) -> dict[str, Any]:
    """:func:`read_toml`; a :class:`UsageError` saying ``missing`` if there is no such file,
    else what is wrong with it."""
    if not path.exists():
        raise UsageError(missing)
    try:
        return read_toml(path)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _check_same_run(run: str, saved: dict[str, Any], from_file: dict[str, Any],
                    config: str | None, given: dict[str, Any]) -> None:
    """A :class:`UsageError` if the command line or the --config file asks to resume
    ``run`` with another of its :data:`RUN_IDENTITY` settings than it was trained with."""
    asked = {name: (value, f" ({name} in {config})", f"{name} from {config}")
             for name, value in from_file.items()}
    asked.update({name: (value, "", f"--{name}") for name, value in given.items()})
    conflicts = [f"--resume {run}: the run was trained with --{name} {saved[name]}; this asks "
                 f"for {asked[name][0]}{asked[name][1]}; drop {asked[name][2]} or start a new "
                 "run with another --out" for name in RUN_IDENTITY
                 if name in saved and name in asked and asked[name][0] != saved[name]]
    if conflicts:
        raise UsageError("\n".join(conflicts))


def train(cfg: TrainConfig) -> dict[str, Any] | None:
    """Run the workers of ``cfg``; rank 0's summary (None on other torchrun ranks). Link
    faults run in a helper process (:mod:`lsgd.train.injector`); ``faults.csv`` is
    written at the end, also when the run failed."""
    import lsgd
    from lsgd.train import chaos, faults, injector, outputs
    from lsgd.train.run_worker import run_worker

    cfg = chaos.with_chaos(cfg)
    out = cfg.out_dir
    if under_torchrun() and cfg.elastic:
        return _elastic_node(cfg, out)
    if under_torchrun():
        from lsgd.comm import shutdown
        from lsgd.comm.distributed import init_from_env

        init_from_env(datetime.timedelta(seconds=cfg.timeout))
        info = lsgd.get_communicator(groups=None).info
        if info.world_size != cfg.workers and cfg.workers != TrainConfig.workers:
            print(f"note: torchrun started {info.world_size} workers; --workers ignored",
                  file=sys.stderr)
        cfg = resolve_replica(dataclasses.replace(cfg, workers=info.world_size,
                                                  groups=info.groups))
        # A restart continues the folder that the first attempt made.
        if info.rank == 0 and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0:
            prepare(cfg, out)
            _note_shared_store()
        try:
            return run_worker(info, cfg)
        finally:
            shutdown()
    prepare(cfg, out)
    start = time.time()
    helper = injector.start(cfg.faults.fault, os.getpid(), out, cfg.link) if cfg.link else None
    logs = os.environ.get("LSGD_LOG_DIR")
    os.environ["LSGD_LOG_DIR"] = str(out / "logs")  # the agents' logs (lsgd.launcher)
    try:
        if cfg.elastic:
            from lsgd.train.elastic_run import train_elastic

            summary = train_elastic(cfg, started=start)[0]
        elif cfg.backend == "threads":  # cfg.replica reaches the strategy by cfg alone
            summary = lsgd.simulate(run_worker, cfg.workers, cfg.groups, args=(cfg,),
                                    seed=cfg.seed, step_time=cfg.step_times(),
                                    link=cfg.link)[0]
        else:
            summary = lsgd.launch(run_worker, cfg.workers, cfg.groups,
                                  args=(cfg, start), timeout=cfg.timeout, link=cfg.link,
                                  max_restarts=cfg.faults.restarts)[0]
    finally:
        os.environ.pop("LSGD_LOG_DIR", None)
        if logs is not None:
            os.environ["LSGD_LOG_DIR"] = logs
        if helper is not None:
            helper.kill()
            helper.wait()
        counts = faults.write_table(out, start)
    if cfg.faults.fault and summary is not None:  # the faults it met, counted
        summary.update(counts)
        outputs.write_json(out / "summary.json", {k: v for k, v in summary.items()
                                                  if k != "plots"})
    return summary


def _elastic_node(cfg: TrainConfig, out: Path) -> dict[str, Any] | None:
    """``lsgd train --elastic --slot K --lighthouse URL`` under one torchrun per node: one of
    this node's workers; the run's summary if it wrote the run's files."""
    import lsgd
    from lsgd.train.elastic_run import elastic_worker

    # torchrun --standalone: RANK and WORLD_SIZE are this node's own.
    local, per_node = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if local == 0 and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0:
        prepare(cfg, out)
    if per_node > 1:  # the node's workers share a process group
        from lsgd.comm.distributed import init_from_env

        init_from_env(datetime.timedelta(seconds=cfg.timeout))
    assert cfg.quorum.slot is not None and cfg.quorum.lighthouse is not None, "validated"
    info = lsgd.WorkerInfo(rank=local, world_size=per_node, groups=1)
    record = elastic_worker(info, cfg.quorum.slot, cfg.workers // per_node,
                            cfg.quorum.lighthouse, cfg, time.time(), [],
                            address=cfg.quorum.address or socket.gethostname())
    return record.get("summary")


def _note_shared_store() -> None:
    """Under torchrun with restarts across nodes: say what they need to work."""
    env = os.environ
    if (int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0
            and int(env.get("GROUP_WORLD_SIZE", "1")) > 1
            and env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)):
        print("note: restarts across nodes need a fresh store per restart: export "
              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before torchrun on every node, and bound "
              "the wait for a node that does not come back: --rdzv-conf join_timeout=60 "
              "(see docs/reliability.md)", file=sys.stderr)


def check_new_run(cfg: TrainConfig, out: Path) -> None:
    """A run folder that already holds a run is continued with --resume, never overwritten."""
    if not cfg.resume and (out / "metrics.csv").exists():
        raise UsageError(f"{out} already holds a run; continue it with --resume {out} or "
                         "choose another --out")


def prepare(cfg: TrainConfig, out: Path) -> None:
    from lsgd.train import outputs
    from lsgd.train.build import make_run_folder

    check_new_run(cfg, out)
    make_run_folder(out)
    outputs.atomic_write(out / "config.toml", cfg.to_toml())


def check_before_start(cfg: TrainConfig) -> None:
    """Fail fast, before any worker starts, on what a person can fix."""
    from lsgd.train.run_worker import preflight

    preflight(cfg)
    if cfg.elastic:
        if under_torchrun() and cfg.quorum.lighthouse is None:
            raise UsageError("--elastic under torchrun runs one node's worker: give --slot K and "
                             "--lighthouse http://HOST:29510 (docs/multinode.md); without "
                             "torchrun, lsgd train --elastic starts every worker itself")
        if not under_torchrun() and cfg.quorum.lighthouse is not None:
            raise UsageError("--lighthouse and --slot are for one torchrun per node; without "
                             "torchrun, lsgd train --elastic starts the lighthouse itself")
        if importlib.util.find_spec("torchft") is None:
            from lsgd.comm.quorum import EXTRA

            raise UsageError(f"--elastic needs torchft, an optional extra: {EXTRA}")
    _check_resumable(cfg)


def launch_from_this_process(cfg: TrainConfig) -> None:
    """Before this process starts worker processes: start their fork server first (it
    imports torch and reads the dataset once for every worker while this process checks
    the run), and keep this one fit to fork from, its torch on one thread."""
    if cfg.backend == "processes" and not under_torchrun():
        from lsgd.launcher.worker import (PRELOAD_ENV, prepare_forkserver, start_method,
                                          vouch_for_fork)

        if cfg.link is None and not cfg.elastic and start_method(1, by_agent=True) == "forkserver":
            os.environ[PRELOAD_ENV] = json.dumps([cfg.dataset, cfg.data_dir])
            try:
                prepare_forkserver(module="lsgd.train.run_worker")
            finally:
                os.environ.pop(PRELOAD_ENV, None)
        import torch

        torch.set_num_threads(1)
        vouch_for_fork()


def train_and_report(cfg: TrainConfig) -> tuple[int, dict[str, Any] | None]:
    """:func:`train`, its failures as the command reports them: (exit code, rank 0's
    summary or None). A run whose every worker diverged is exit code 1, said once."""
    from lsgd.comm import SimulationError
    from lsgd.launcher import LaunchError
    from lsgd.strategies import DivergedError

    try:
        return 0, train(cfg)
    except SimulationError as error:
        cause = error.__cause__
        if isinstance(cause, UsageError):
            raise cause from None
        if isinstance(cause, DivergedError):
            return _diverged(cause), None
        raise
    except DivergedError as error:  # under torchrun: this process's worker
        return _diverged(error), None
    except LaunchError as error:
        if "DivergedError: " in str(error):
            return _diverged(str(error).split("DivergedError: ", 1)[1].splitlines()[0]), None
        raise RuntimeError(str(error)) from None


def _diverged(error: BaseException | str) -> int:
    """Every worker diverged: the reason and where the last good checkpoint is; exit code 1."""
    print(f"lsgd train: error: training diverged: {error}", file=sys.stderr)
    return 1


def _check_resumable(cfg: TrainConfig) -> None:
    """``--resume RUN`` (not under torchrun): a ``UsageError`` naming the files and the fix
    unless a checkpoint of this many workers, method and model verifies."""
    from lsgd.train import checkpoint

    if not cfg.resume or under_torchrun():
        return
    run = Path(cfg.resume)
    found = checkpoint.complete(run)
    if not found:
        raise UsageError(f"--resume {run}: no complete checkpoint in {checkpoint.folder(run)} "
                         "(the run stopped before its first one); start it again without "
                         "--resume, with --checkpoint-every N to save every N steps")
    sizes = {c.meta["world_size"] for c in found}
    if cfg.workers not in sizes:
        raise UsageError(f"--resume {run}: its checkpoints are of {max(sizes)} workers, this "
                         f"run asks for {cfg.workers}; resume with --workers {max(sizes)}")
    chosen, problems = checkpoint.usable(run, cfg.workers)
    if chosen is None:
        raise UsageError(f"--resume {run}: no usable checkpoint: " + "; ".join(problems))
    try:  # the workers' count was checked above
        checkpoint.check_identity(run, chosen, {name: getattr(cfg, name) for name in RUN_IDENTITY
                                                if name != "workers"})
    except ValueError as error:
        raise UsageError(str(error)) from None


def dry_run(cfg: TrainConfig) -> int:
    """``lsgd train --dry-run``: every check a real run makes before its workers start that reads
    no data and creates nothing, notes on what was not checked (stderr), then the config.toml the
    run would save (stdout, ``dry_run = false``: ``--config`` of it starts the real run)."""
    from lsgd.train.build import preflight

    notes = preflight(cfg, read_data=False)
    check_new_run(cfg, cfg.out_dir)
    _check_resumable(cfg)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(cfg.but(dry_run=False).to_toml(), end="")
    return 0
