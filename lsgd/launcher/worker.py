"""What every launched worker process runs (:func:`process_main`), how its failure is
reported (:class:`LaunchError`) and how it is started (:func:`start_method`): shared by
the local launcher and the shaped network's per-node agents.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import importlib
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn


class LaunchError(RuntimeError):
    """A worker process failed; the message carries its rank and error."""


def _run(fn: Callable[..., Any], groups: int, timeout_s: float, args: Sequence[Any],
         replica: str = "process", log_dir: str | None = None) -> Any:
    import signal

    from lsgd.comm import get_communicator, shutdown
    from lsgd.comm.distributed import init_from_env

    # When a worker fails, the agent stops the others with SIGTERM. The agent's handler,
    # inherited by a fork, raises only once the interpreter runs again: a worker blocked
    # in a collective would hold every node's restart for the agent's 30 s grace. The
    # default action ends it now (checkpoints are written atomically).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # What the worker started with (torch, a fork server's dataset) stays for its life:
    # out of the collector's sight, a full collection scans only what the run made.
    gc.freeze()

    # A worker forked from a fork server has the server's environment, from its start:
    # the launch's log folder comes as an argument ("" for none).
    os.environ.update(LSGD_GROUPS=str(groups), LSGD_REPLICA=replica, LSGD_LOG_DIR=log_dir or "")
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:  # a forked worker has the launcher's torch, already initialized
        import torch

        torch.set_num_threads(int(threads))
    init_from_env(datetime.timedelta(seconds=timeout_s))
    try:
        result = fn(get_communicator().processes.info, *args)
    finally:
        shutdown()
    watch_exit(EXIT_GRACE_S)
    return result


#: Seconds a worker may take to end once its result is handed to its agent.
EXIT_GRACE_S = 30.0


def watch_exit(grace_s: float) -> None:
    """End this process if it still runs ``grace_s`` seconds after its work was done (a
    library's thread joined at exit can hang the teardown forever), unless it is in
    torch's hand-over. Every thread's stack goes to stderr (and
    ``LSGD_LOG_DIR/exit-PID.txt``); the exit code is 0: the result was delivered."""
    import threading

    main = threading.main_thread()

    def handing_over() -> bool:  # torch's: the result queued, the node's others awaited
        frame = sys._current_frames().get(main.ident or -1)
        codes = [caller.f_code for caller, _ in traceback.walk_stack(frame)] if frame else []
        return any(code.co_name == "_wrap" and "elastic" in code.co_filename for code in codes)

    def watch() -> None:
        while True:
            time.sleep(grace_s)
            if not handing_over():
                _dump_and_end(grace_s)

    threading.Thread(target=watch, name="lsgd-exit-watch", daemon=True).start()


def _dump_and_end(grace_s: float) -> NoReturn:
    import faulthandler

    line = (f"lsgd worker (pid {os.getpid()}): still running {grace_s:.0f} s after its work "
            "was done and its result handed over; ended with code 0. Every thread's stack:")
    print(line, file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    folder = os.environ.get("LSGD_LOG_DIR")
    if folder:
        with contextlib.suppress(OSError), open(
                os.path.join(folder, f"exit-{os.getpid()}.txt"), "w") as out:
            print(line, file=out, flush=True)
            faulthandler.dump_traceback(file=out, all_threads=True)
    exit_now(0)


def process_main(fn: Callable[..., Any], groups: int, timeout_s: float,
                 args: Sequence[Any], replica: str = "process",
                 log_dir: str | None = None) -> Any:
    """One worker process: join the process group (``env://``) and run ``fn(info,
    *args)``, its error recorded where its agent reads it (torch's ``record``, applied
    here so that ``import lsgd`` does not load the elastic launcher). ``replica``: the
    strategies' default; ``log_dir``: the launch's ``LSGD_LOG_DIR``."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_run)(fn, groups, timeout_s, args, replica, log_dir)


def failure_lines(failures: Mapping[int, Any], where: str = "") -> list[str]:
    """``rank R[ where]: message`` for each failed rank, from what the elastic agent recorded."""
    lines = []
    for rank, failure in sorted(failures.items()):
        message = failure.message
        if isinstance(message, dict):
            message = message.get("message", message)
        lines.append(f"rank {rank}{where}: {message}")
    return lines


def threads_for(world_size: int, threads_per_worker: int | None) -> int:
    """Intra-op threads of each worker: as given, else this machine's cores shared out."""
    return threads_per_worker or max(1, (os.cpu_count() or 1) // world_size)


#: The number of threads this process ran when :func:`vouch_for_fork` was called.
_vouched: int | None = None


def vouch_for_fork() -> None:
    """Declare this process fit to fork shaped nodes' agents from: it runs no torch
    thread pool and no thread of its own, and starts none before it launches
    (``lsgd train`` does this, having set torch to one thread)."""
    global _vouched
    import torch  # noqa: F401 - its import's own threads, if any, counted as the baseline

    _vouched = _thread_count()


def _thread_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def start_method(threads: int, by_agent: bool = False) -> str:
    """How processes are started (``LSGD_START_METHOD`` overrides the choice): ``"fork"``
    (in milliseconds, sharing what the launcher imported and read) only where it is
    safe: on Linux, without CUDA, one intra-op thread per worker (a child of a process
    that used GNU OpenMP's pool hangs in its first parallel region), from a process that
    vouched for itself (:func:`vouch_for_fork`) and has started no thread since (a
    thread holding a lock at the fork leaves the child waiting for it forever), and not
    ``by_agent`` (torch's agent runs its rendezvous threads by then). Elsewhere on Linux
    ``"forkserver"`` (:func:`prepare_forkserver`), else ``"spawn"``.
    """
    chosen = os.environ.get("LSGD_START_METHOD")
    if chosen is not None:
        if chosen not in START_METHODS:
            raise ValueError(f"LSGD_START_METHOD={chosen!r}: use one of "
                             f"{', '.join(START_METHODS)}")
        return chosen
    if not sys.platform.startswith("linux"):
        return "spawn"
    if threads != 1 or by_agent or _vouched is None:  # decided before torch is imported
        return "forkserver"
    import threading

    import torch

    fit = _thread_count() == _vouched and threading.active_count() == 1
    return "fork" if fit and not torch.cuda.is_available() else "forkserver"


START_METHODS = ("fork", "forkserver", "spawn")


def before_start(method: str, fn: Callable[..., Any]) -> None:
    """Ready what the workers are started from: before a fork, import here what every
    worker would import (torch's optimizers load ``torch._dynamo`` on their first step,
    about a second); before a forkserver start, the server (:func:`prepare_forkserver`)."""
    if method == "fork":
        importlib.import_module("torch._dynamo")
    elif method == "forkserver":
        prepare_forkserver(fn)


#: ``[dataset, data_dir]`` in JSON: the data a fork server of ``lsgd train`` reads first.
PRELOAD_ENV = "LSGD_PRELOAD_DATA"


def prepare_forkserver(fn: Callable[..., Any] | None = None, module: str | None = None) -> None:
    """Start this process's fork server if it does not run yet, with torch, ``torch._dynamo``
    and ``fn``'s module (or ``module``) imported there once for every worker it forks."""
    from multiprocessing import forkserver

    modules = ["torch", "torch._dynamo", "lsgd.launcher.worker"]
    module = module or getattr(fn, "__module__", None)
    if module and module != "__main__":
        modules.append(module)
    forkserver.set_forkserver_preload(modules)
    forkserver.ensure_running()


@contextlib.contextmanager
def quiet_elastic_agent(threads: int) -> Iterator[None]:
    """While launching: the elastic agent's logs kept off the terminal (:class:`LaunchError`
    says what failed, once) or written to ``LSGD_LOG_DIR/agent-PID.log``;
    ``OMP_NUM_THREADS=threads`` for the workers; Python's warning about forking a process
    with threads (the agent's own, which the workers do not use) silenced."""
    import logging

    elastic_log = logging.getLogger("torch.distributed.elastic")
    level, propagate = elastic_log.level, elastic_log.propagate
    handler: logging.Handler = logging.NullHandler()
    folder = os.environ.get("LSGD_LOG_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        handler = logging.FileHandler(os.path.join(folder, f"agent-{os.getpid()}.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        elastic_log.propagate = False
    elastic_log.addHandler(handler)
    elastic_log.setLevel(logging.INFO if folder else logging.CRITICAL)
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks",
                                    category=DeprecationWarning)
            yield
    finally:
        elastic_log.setLevel(level)
        elastic_log.propagate = propagate
        elastic_log.removeHandler(handler)
        handler.close()
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def run_workers(fn: Callable[..., Any], groups: int, timeout_s: float, args: Sequence[Any],
                replica: str, threads: int, **config: Any) -> dict[int, Any]:
    """Start workers that each run :func:`process_main` with ``fn`` by torch's elastic agent
    in this process (``torchrun``'s machinery: a c10d rendezvous, ``config`` the rest of
    its ``LaunchConfig``); their results by rank. ``ChildFailedError`` when they failed
    once more than the agent's restarts allow."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    method = start_method(threads, by_agent=True)
    before_start(method, fn)
    launch = LaunchConfig(rdzv_backend="c10d", monitor_interval=0.05, start_method=method,
                          **config)
    with quiet_elastic_agent(threads):
        return elastic_launch(launch, process_main)(fn, groups, timeout_s, tuple(args), replica,
                                                    os.environ.get("LSGD_LOG_DIR"))


def exit_now(code: int) -> NoReturn:
    """End this process at once, its output flushed: its outcome is delivered, and no
    teardown of torch's interpreter state (a fork server, a store's threads) may keep
    the launcher waiting for it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
