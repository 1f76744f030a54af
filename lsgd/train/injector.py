"""The link injector: ``link-down`` and ``slow`` faults on a run's shaped network, from a helper
process (:func:`start`) beside the launch, which builds the network and forks the workers (so
starts no thread). For each fault it waits for the run's first training step (the fault log's
``start`` event) and the node's namespace, takes the link down SECOND seconds later (or shapes
it to RATE), brings it back after SECONDS and logs the fault; it ends with its faults or the run.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsgd.links.netns import alive as _alive
from lsgd.train.faults import LINK_KINDS, Fault, append, fired, parse, started


def start(specs: list[str], owner: int, run: Path, link: str) -> subprocess.Popen[bytes] | None:
    """The helper process for the link faults among ``specs`` (None when there are none)."""
    faults = [s for s in specs if parse(s).kind in LINK_KINDS and s not in fired(run)]
    if not faults:
        return None
    job = json.dumps({"specs": faults, "owner": owner, "run": str(run), "link": link})
    return subprocess.Popen([sys.executable, "-m", "lsgd.train.injector", job],
                            stdin=subprocess.DEVNULL, start_new_session=True)


def run(specs: list[str], owner: int, run_dir: Path, link: str) -> None:
    """Fire the link faults ``specs`` on process ``owner``'s network, each on a thread of
    its own (they may overlap), and return when all are done or ``owner`` ended."""
    threads = [threading.Thread(target=_fire, args=(parse(spec), owner, run_dir, link),
                                daemon=True) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _fire(fault: Fault, owner: int, run_dir: Path, link: str) -> None:
    from lsgd.links import netns
    from lsgd.links.spec import parse_link

    normal = parse_link(link)
    slow = dataclasses.replace(normal, rate=parse_link(fault.rate or link).rate)
    node = fault.node or 0
    namespace = netns.node_namespace(node, owner)

    def strike(broken: bool) -> None:
        """The node's link down (or slow), or back as it was."""
        if fault.kind == "link-down":
            netns.set_node_link(node, not broken, owner=owner)
        else:
            netns.set_node_rate(node, slow if broken else normal, owner=owner)

    origin = _wait_for(lambda: started(run_dir), owner)  # the run's first training step
    if origin is None:
        return
    due = origin + (fault.at_second or 0.0)
    if not (_wait_for(lambda: time.time() >= due, owner)
            and _wait_for(lambda: netns.has_namespace(namespace), owner)):
        return
    second = time.time() - origin
    print(f"fault: {fault.spec} on node {fault.node} ({second:.1f} s into training)",
          file=sys.stderr, flush=True)
    append(run_dir, event="fault", spec=fault.spec, kind=fault.kind, node=fault.node,
           second=round(second, 3))
    try:
        strike(True)
        back = time.time() + (fault.seconds or 0.0)
        _wait_for(lambda: time.time() >= back, owner)
    finally:
        if _alive(owner) and netns.has_namespace(namespace):
            strike(False)


def _wait_for(ready: Callable[[], Any], owner: int) -> Any:
    """Poll ``ready`` until it returns a true value, and return that; None if process
    ``owner`` ended first."""
    while not (value := ready()):
        if not _alive(owner):
            return None
        time.sleep(0.1)
    return value if _alive(owner) else None


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    run(job["specs"], int(job["owner"]), Path(job["run"]), job["link"])
