"""One worker of the fault-injection tests (tests/train/test_faults.py); not a test itself.

Started by the test with ``subprocess.Popen`` and torchrun's environment
variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, ...), never by torchrun
itself, whose agent would kill the survivors as soon as one worker dies.

Usage: ``python tests/fault_worker.py MODE TIMEOUT_S VICTIM BLOCK_AT STEPS``

Every worker trains a tiny ``nn.Linear`` with LSGD and prints ``rank R step S``
after each step. Before step ``BLOCK_AT`` rank ``VICTIM`` prints ``rank R
blocking before step S`` and sleeps, so the test can kill or stop it there.

* ``MODE=sync``: synchronous LSGD with period 2; make ``BLOCK_AT`` even, so
  the others wait for the victim in the round of that step.
* ``MODE=async``: asynchronous LSGD with a period too long for any round, so
  the only communication is the shared step counter in the c10d store, which
  rank 0 serves: stopping rank 0 leaves the others waiting on the store.

With ``FAULT_SYNC_DIR`` set, the workers wait for each other (a file each in
that folder) before they initialize the process group, so that the short
collective timeout does not have to cover the time they take to import torch.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path


def _wait_for_everyone(rank: int, world: int) -> None:
    folder = os.environ.get("FAULT_SYNC_DIR")
    if not folder:
        return
    Path(folder, f"ready-{rank}").touch()
    while len(list(Path(folder).glob("ready-*"))) < world:
        time.sleep(0.02)


def main(mode: str, timeout_s: float, victim: int, block_at: int, steps: int) -> None:
    import torch
    from torch import nn

    import lsgd
    from lsgd.comm.distributed import init_from_env

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    _wait_for_everyone(rank, world)
    init_from_env(datetime.timedelta(seconds=timeout_s))
    comm = lsgd.get_communicator()
    torch.manual_seed(rank)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if mode == "sync":
        strategy = lsgd.LSGD(model, optimizer, period=2, comm=comm)
    else:
        strategy = lsgd.LSGD(model, optimizer, period=10**6, comm=comm, asynchronous=True)
    print(f"rank {rank} ready", flush=True)
    for step in range(1, steps + 1):
        x = torch.randn(8, 4)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        if rank == victim and step == block_at:
            print(f"rank {rank} blocking before step {step}", flush=True)
            time.sleep(3600)
        strategy.step(loss)
        print(f"rank {rank} step {step}", flush=True)
        if mode == "async":
            time.sleep(0.005)  # keep stepping until the victim is stopped
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    mode, timeout, victim, block_at, steps = sys.argv[1:6]
    if mode not in ("sync", "async"):
        raise SystemExit(f"MODE must be sync or async, got {mode!r}")
    main(mode, float(timeout), int(victim), int(block_at), int(steps))
