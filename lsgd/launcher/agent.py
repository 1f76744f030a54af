"""One node's elastic agent on the shaped network, in the node's namespace: forked
(:func:`run_node`) or as ``python -m lsgd.launcher.agent PAYLOAD NODE RESULT``. It
writes ``{"results": {rank: value}, "failures": [...]}`` to ``RESULT``.
"""

from __future__ import annotations

import multiprocessing.spawn
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from lsgd.launcher.worker import exit_now, failure_lines, run_workers
from lsgd.links.netns import node_address


def run_node(job: dict[str, Any], node: int, result_path: str) -> int:
    """Node ``node``'s elastic agent for ``job``; its outcome written to ``result_path``."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    outcome: dict[str, Any] = {"results": {}, "failures": []}
    start = time.monotonic()
    try:
        outcome["results"] = dict(run_workers(
            job["fn"], job["groups"], job["timeout"], job["args"], job["replica"],
            int(os.environ.get("OMP_NUM_THREADS", "1")), min_nodes=job["nodes"],
            max_nodes=job["nodes"], nproc_per_node=job["per_node"], run_id=job["run_id"],
            rdzv_endpoint=job["endpoint"], max_restarts=job["max_restarts"],
            local_addr=node_address(node),
            # join_timeout bounds every rendezvous round, a restart's included: one that
            # cannot gather every node fails after it (torch's default is 10 minutes).
            rdzv_configs={"is_host": node == 0, "join_timeout": int(job["join_timeout"]),
                          "last_call_timeout": 1, "close_timeout": 10}))
    except ChildFailedError as error:
        spent = job["max_restarts"]
        gave_up = [f"node {node}: its workers failed {spent + 1} time(s), {spent} restart(s) "
                   f"allowed (restarts): its agent gave up after "
                   f"{time.monotonic() - start:.0f} s and closed the rendezvous. Its last "
                   "attempt:"] if spent else []
        outcome["failures"] = [*gave_up, *failure_lines(error.failures, f" (node {node})")]
    except Exception as error:  # rendezvous and store errors: name the node and the limit
        outcome["failures"] = [explain(error, node, job, time.monotonic() - start)]
        outcome["waited"] = type(error).__name__ if type(error).__name__ in WAITED else None
    Path(result_path).write_bytes(pickle.dumps(outcome))
    return 1 if outcome["failures"] else 0


#: Errors of an agent that was in the rendezvous, waiting for the other nodes.
WAITED = ("RendezvousTimeoutError", "RendezvousClosedError")


def explain(error: Exception, node: int, job: dict[str, Any], seconds: float) -> str:
    """``node N: ErrorName: what ran out, and what it means`` for an agent's error."""
    name = type(error).__name__
    meanings = {
        "RendezvousTimeoutError": (
            f"the rendezvous did not gather all {job['nodes']} nodes within its join_timeout "
            f"of {job['join_timeout']:.0f} s: a node did not come back (its link is down, "
            "its agent was stopped, or it gave up; see its line)"),
        "RendezvousClosedError": (
            "the rendezvous was closed before this node could start its workers again: "
            "another node's agent stopped (its restarts spent, or its rendezvous timed out; "
            "see its line)"),
        "RendezvousConnectionError": (
            f"the rendezvous store at {job['endpoint']} (node 0's agent) did not answer: this "
            f"node's or node 0's link is down, or node 0's agent is gone "
            f"({error or 'no answer'})")}
    return f"node {node}: {name} after {seconds:.0f} s: {meanings.get(name, error)}"


if __name__ == "__main__":  # python -m lsgd.launcher.agent PAYLOAD NODE RESULT
    payload = pickle.loads(Path(sys.argv[1]).read_bytes())
    if payload["main_path"] and Path(payload["main_path"]).is_file():
        # The caller's script as spawn loads it (its guarded main block does not run).
        multiprocessing.spawn.import_main_path(payload["main_path"])
    exit_now(run_node(pickle.loads(payload["job"]), int(sys.argv[2]), sys.argv[3]))
