"""``lsgd train`` and ``lsgd plot``: argument parsing and running the workers.

How the workers run:

* ``--backend processes`` (default): W local processes over torch.distributed
  (gloo on CPU, NCCL with one GPU per worker), started with torch's own elastic
  launcher (:func:`lsgd.launch`);
* the same command under ``torchrun`` joins the job as this process's worker
  (groups = nodes);
* ``--backend threads``: the in-process simulator.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import sys
import typing
from pathlib import Path
from typing import Any

from lsgd.train.config import TrainConfig, make_config, read_toml
from lsgd.train.build import UsageError


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


def add_train_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "train", help="train a model with any method",
        description="Train a model with LSGD or a baseline on one machine or many. "
                    "Options can also come from --config FILE.toml; the command line wins.",
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--config", help="TOML file with settings (keys as the long options)")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flags = ["--" + f.name.replace("_", "-"), *f.metadata.get("flags", ())]
        kind = hints[f.name]
        args = typing.get_args(kind)
        base = next((a for a in args if a is not type(None)), kind) if args else kind
        default = f.default
        help_text = f.metadata["help"] + (f" (default: {default})" if default not in (None, ()) else "")
        if base is bool:
            parser.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction,
                                help=help_text)
        elif typing.get_origin(kind) is list or base is list or typing.get_origin(base) is list:
            item = typing.get_args(kind)[0] if typing.get_args(kind) else float
            parser.add_argument(*flags, dest=f.name, type=item, nargs="+", action="extend",
                                help=help_text)
        else:
            parser.add_argument(*flags, dest=f.name, type=base if base in (int, float) else str,
                                choices=f.metadata.get("choices"), help=help_text, metavar=None)
    parser.set_defaults(handler=run_train)


#: What makes a run the run it is: resuming it with other values is a mistake.
RUN_IDENTITY = ("method", "model", "dataset", "workers", "groups")


def resolve(args: argparse.Namespace) -> TrainConfig:
    """Defaults, then the resumed run's or --config's settings, then the command line."""
    given = {k: v for k, v in vars(args).items() if k not in ("handler", "parser", "config", "command")}
    config = getattr(args, "config", None)
    from_file: dict[str, Any] = {}
    if config:
        if not Path(config).exists():
            raise UsageError(f"--config {config}: no such file")
        from_file = _read_settings(config)
    settings: dict[str, Any] = {}
    if "resume" in given:
        run = given["resume"]
        saved = Path(run) / "config.toml"
        if not saved.exists():
            raise UsageError(f"--resume {run}: no run there ({saved} is missing); give a run "
                             "folder lsgd train wrote, or drop --resume to start a new run")
        settings.update(_read_settings(saved))
        settings.pop("dry_run", None)  # a resumed run is a dry run only if this command says so
        _check_same_run(run, settings, from_file, config, given)
        settings["out"] = run
    settings.update(from_file)
    settings.update(given)
    try:
        return make_config(settings)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from error


def _read_settings(path: str | Path) -> dict[str, Any]:
    """:func:`read_toml`, its mistakes as a :class:`UsageError`."""
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
    conflicts = [
        f"--resume {run}: the run was trained with --{name} {saved[name]}; this asks for "
        f"{asked[name][0]}{asked[name][1]}; drop {asked[name][2]} or start a new run "
        "with another --out"
        for name in RUN_IDENTITY
        if name in saved and name in asked and asked[name][0] != saved[name]
    ]
    if conflicts:
        raise UsageError("\n".join(conflicts))


def train(cfg: TrainConfig) -> dict[str, Any] | None:
    """Run the workers of ``cfg``; rank 0's summary (None on other torchrun ranks)."""
    import lsgd
    from lsgd.train import loop

    out = cfg.out_dir
    if _under_torchrun():
        from lsgd.comm import shutdown
        from lsgd.comm.distributed import init_from_env

        init_from_env(datetime.timedelta(seconds=cfg.timeout))
        info = lsgd.get_communicator(groups=None).info
        if info.world_size != cfg.workers and cfg.workers != TrainConfig.workers:
            print(f"note: torchrun started {info.world_size} workers; --workers ignored",
                  file=sys.stderr)
        cfg = dataclasses.replace(cfg, workers=info.world_size, groups=info.groups)
        restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
        if info.rank == 0 and not restarted:  # a restart continues the folder it made
            _prepare(cfg, out)
            _note_shared_store()
        try:
            return loop.run_worker(info, cfg)
        finally:
            shutdown()
    _prepare(cfg, out)
    if cfg.backend == "threads":
        results = lsgd.simulate(loop.run_worker, cfg.workers, cfg.groups, args=(cfg,),
                                seed=cfg.seed, step_time=cfg.step_times(),
                                link=cfg.link)
    else:
        results = lsgd.launch(loop.run_worker, cfg.workers, cfg.groups, args=(cfg,),
                              timeout=cfg.timeout, link=cfg.link, max_restarts=cfg.restarts)
    return results[0]


def _note_shared_store() -> None:
    """Under torchrun with restarts across nodes: say what they need to work."""
    env = os.environ
    if (int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0
            and int(env.get("GROUP_WORLD_SIZE", "1")) > 1
            and env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)):
        print("note: restarts across nodes need a fresh store per restart: export "
              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before torchrun on every node, and give "
              "--max-restarts twice the failures to survive (see docs/reliability.md)",
              file=sys.stderr)


def _check_new_run(cfg: TrainConfig, out: Path) -> None:
    """A run folder that already holds a run is continued with --resume, never overwritten."""
    if not cfg.resume and (out / "metrics.csv").exists():
        raise UsageError(
            f"{out} already holds a run; continue it with --resume {out} or choose another --out"
        )


def _prepare(cfg: TrainConfig, out: Path) -> None:
    from lsgd.train import outputs
    from lsgd.train.build import make_run_folder

    _check_new_run(cfg, out)
    make_run_folder(out)
    outputs.atomic_write(out / "config.toml", cfg.to_toml())


def run_train(args: argparse.Namespace) -> int:
    from lsgd.comm import SimulationError
    from lsgd.launcher import LaunchError
    from lsgd.strategies import DivergedError

    cfg = resolve(args)
    if cfg.dry_run:
        return dry_run(cfg)
    from lsgd.train import loop

    loop.preflight(cfg)  # fail fast, before any worker starts, on what a person can fix
    if cfg.resume and not _under_torchrun():
        _check_resumable(cfg)
    try:
        summary = train(cfg)
    except SimulationError as error:
        cause = error.__cause__
        if isinstance(cause, UsageError):
            raise cause from None
        if isinstance(cause, DivergedError):
            return _diverged(cause)
        raise
    except DivergedError as error:  # under torchrun: this process's worker
        return _diverged(error)
    except LaunchError as error:
        if "DivergedError: " in str(error):
            return _diverged(str(error).split("DivergedError: ", 1)[1].splitlines()[0])
        raise RuntimeError(str(error)) from None
    if summary is not None:
        print_summary(summary)
    return 0


def _diverged(error: BaseException | str) -> int:
    """Every worker diverged: the reason and where the last good checkpoint is; exit code 1."""
    print(f"lsgd train: error: training diverged: {error}", file=sys.stderr)
    return 1


def _check_resumable(cfg: TrainConfig) -> None:
    """``--resume RUN``: a checkpoint whose files all verify, written by this method and
    model for this many workers; else a ``UsageError`` naming the files and the fix."""
    from lsgd.train import checkpoint

    run = Path(cfg.resume or "")
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
    try:
        checkpoint.check_identity(run, chosen, {"method": cfg.method, "model": cfg.model,
                                                "dataset": cfg.dataset, "groups": cfg.groups})
    except ValueError as error:
        raise UsageError(str(error)) from None


def dry_run(cfg: TrainConfig) -> int:
    """``lsgd train --dry-run``: every check a real run makes before its workers start
    that reads no data and creates nothing (:func:`~lsgd.train.build.preflight` with
    ``read_data=False``, a run already in ``--out``, ``--resume``'s checkpoints), then
    the resolved settings as TOML on stdout, with ``dry_run = false``: the text the
    run would save as its config.toml, so ``--config`` of it starts the real run.
    Notes on what was not checked go to stderr."""
    from lsgd.train.build import preflight

    notes = preflight(cfg, read_data=False)
    _check_new_run(cfg, cfg.out_dir)
    if cfg.resume and not _under_torchrun():
        _check_resumable(cfg)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(dataclasses.replace(cfg, dry_run=False).to_toml(), end="")
    return 0


def _clock_unit(summary: dict[str, Any]) -> str:
    if summary["backend"] != "threads":
        return " s per worker"
    if summary.get("link_kind") == "modeled":
        return " s per worker (simulator's clock: compute plus modeled transfers)"
    return " step-times per worker (simulator's virtual clock)"


def print_summary(summary: dict[str, Any]) -> None:
    def pct(value: Any) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
            else f"{100 * value:.2f}%"

    rows = [
        ("method", f"{summary['method']}{' (async)' if summary.get('asynchronous') else ''} "
                   f"({summary['workers']} workers, {summary['groups']} group(s), "
                   f"{summary['backend']})"),
        ("model / data", f"{summary['model']} on {summary['dataset']}"),
        ("center test accuracy", pct(summary["test_accuracy"])),
        ("leader test accuracy", pct(summary["leader_test_accuracy"])),
        ("steps / epochs", f"{summary['steps']:g} / {summary['epochs']:.2f}"
                           + (" (mean of the workers)" if summary.get("asynchronous") else "")),
        ("steps per worker", " ".join(str(n) for n in summary.get("worker_steps", []))
                             + f" ({summary.get('steps_per_second', 0):.1f} steps/s in all)"),
        ("time in rounds", " ".join(f"{t:.1f}" for t in summary.get("worker_wait_seconds", []))
                           + _clock_unit(summary)),
        ("training time", f"{summary['train_seconds']:.1f} s "
                          f"({summary['seconds_per_epoch'] or 0:.1f} s/epoch)"),
        ("data loading", f"{100 * summary['data_loading_fraction']:.1f}% of step time"),
        ("sent per worker", f"{summary['bytes_sent_per_worker'] / 1e6:.2f} MB "
                            f"in {summary['rounds']} rounds"),
        ("run folder", summary["out"]),
    ]
    if summary.get("link"):
        rows.insert(-1, ("link", f"{summary['link']} ({summary['link_kind']}); communicating "
                                 + " ".join(f"{t:.1f}" for t in
                                            summary.get("worker_comm_seconds", []))
                                 + " s per worker"))
    if summary.get("plots"):
        rows.append(("plots", ", ".join(summary["plots"])))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def add_plot_parser(subparsers: Any) -> None:
    from lsgd.train.plots import METRICS

    parser = subparsers.add_parser(
        "plot", help="overlay the test error (or loss) of several runs",
        description="Draw the center's test error (or test loss) of each run against time "
                    "and steps.")
    parser.add_argument("runs", nargs="+", help="run folders written by lsgd train")
    parser.add_argument("--out", default="comparison.png", help="PNG to write")
    parser.add_argument("--metric", choices=list(METRICS), default="error",
                        help="the center's test error (%%) or its test loss (default: error)")
    parser.add_argument("--zoom", type=float, metavar="FRACTION",
                        help="add a panel on the last FRACTION (0 < FRACTION < 1) of the time "
                             "axis, with its own y range")
    parser.set_defaults(handler=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    from lsgd.train.plots import plot_runs

    runs = [Path(r) for r in args.runs]
    missing = [str(r) for r in runs if not (r / "metrics.csv").exists()]
    if missing:
        raise UsageError(f"not a run folder (no metrics.csv): {', '.join(missing)}")
    if args.zoom is not None and not 0 < args.zoom < 1:
        raise UsageError(f"--zoom {args.zoom}: the fraction of the time axis must lie strictly "
                         "between 0 and 1, e.g. 0.25")
    made = plot_runs(runs, Path(args.out), metric=args.metric, zoom=args.zoom)
    if made is None:
        raise UsageError("plotting needs matplotlib: pip install 'lsgd[plot]'")
    print(made)
    return 0

