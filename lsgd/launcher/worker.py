"""What every launched worker process runs, and how it is started.

Shared by the local launcher (:mod:`lsgd.launcher.local`) and the per-node
agents of the shaped network (:mod:`lsgd.launcher.agent`): the entry point of
a worker process (:func:`process_main`), the way its failure is reported
(:class:`LaunchError`), and the start method of the processes
(:func:`start_method`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any


class LaunchError(RuntimeError):
    """A worker process failed; the message carries its rank and error."""


def _run(fn: Callable[..., Any], groups: int, timeout_s: float, args: Sequence[Any]) -> Any:
    from lsgd.comm import get_communicator, shutdown
    from lsgd.comm.distributed import init_from_env

    os.environ["LSGD_GROUPS"] = str(groups)
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:  # a forked worker has the launcher's torch, already initialized
        import torch

        torch.set_num_threads(int(threads))
    init_from_env(datetime.timedelta(seconds=timeout_s))
    try:
        return fn(get_communicator().info, *args)
    finally:
        shutdown()


def process_main(fn: Callable[..., Any], groups: int, timeout_s: float,
                 args: Sequence[Any]) -> Any:
    """One worker process: join the process group (``env://``), run ``fn(info, *args)``.

    torch's ``record`` writes the worker's exception and traceback where its
    elastic agent reads them, so the parent's :class:`LaunchError` can name it.
    ``record`` is applied here, not as a decorator, so that ``import lsgd`` does
    not load the elastic launcher.
    """
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_run)(fn, groups, timeout_s, args)


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


def start_method(threads: int) -> str:
    """``"fork"`` where it is safe, else ``"spawn"``.

    A forked worker starts in milliseconds: it shares the launcher's imported
    modules and whatever the launcher already read (the dataset ``lsgd
    train`` checks before it starts the workers), and it leaves without
    tearing the interpreter down. A spawned one imports torch afresh (about a
    second of CPU each, more when workers outnumber the cores) and exits
    through the interpreter's shutdown. Forking is safe here only when

    * each worker runs one intra-op thread: a child of a process that has used
      GNU OpenMP's thread pool hangs in its first parallel region (one thread
      never enters one);
    * CUDA is absent: a CUDA context cannot be forked (GPU workers are spawned);
    * the system is Linux, where ``fork`` is the platform's own default.

    ``LSGD_START_METHOD=spawn`` (or ``fork``) overrides the choice.
    """
    chosen = os.environ.get("LSGD_START_METHOD")
    if chosen is not None:
        if chosen not in ("fork", "spawn"):
            raise ValueError(f"LSGD_START_METHOD={chosen!r}: use fork or spawn")
        return chosen
    import torch

    if threads == 1 and sys.platform.startswith("linux") and not torch.cuda.is_available():
        return "fork"
    return "spawn"


def before_fork() -> None:
    """Import in the launcher what every worker would import for itself.

    torch's optimizers load ``torch._dynamo`` on their first step (about a
    second); imported once here, the forked workers share it.
    """
    import torch._dynamo  # noqa: F401


@contextlib.contextmanager
def quiet_elastic_agent(threads: int) -> Iterator[None]:
    """While launching: the elastic agent's failure logs muted (:class:`LaunchError`
    says it once), ``OMP_NUM_THREADS=threads`` for the workers, and Python's
    warning about forking a process with threads silenced (the agent's own
    threads; the workers do not use them)."""
    import logging

    elastic_log = logging.getLogger("torch.distributed.elastic")
    level = elastic_log.level
    elastic_log.setLevel(logging.CRITICAL)
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks",
                                    category=DeprecationWarning)
            yield
    finally:
        elastic_log.setLevel(level)
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
