"""One node's elastic agent on the shaped network (``python -m lsgd.launcher.agent``).

Started by :func:`lsgd.launcher.nodes.launch_on_links` inside a node's namespace:
``python -m lsgd.launcher.agent PAYLOAD NODE RESULT``. It runs torch's elastic
launcher with ``per_node`` workers, c10d rendezvous at node 0 (whose agent
hosts the store), and writes ``{"results": {rank: value}, "failures": [...]}``
to ``RESULT``.
"""

from __future__ import annotations

import os
import pickle
import sys
import types
from pathlib import Path

from lsgd.launcher.worker import (before_fork, failure_lines, process_main,
                                  quiet_elastic_agent, start_method)
from lsgd.links.netns import node_address


def _load_main(path: str | None) -> None:
    """Make the caller's script ``__main__`` (as ``__mp_main__``), so that its
    functions unpickle here and in the spawned workers, as multiprocessing does."""
    if not path or not Path(path).is_file() or Path(path).resolve() == Path(__file__).resolve():
        return
    module = types.ModuleType("__mp_main__")
    module.__file__ = path
    sys.modules["__mp_main__"] = sys.modules["__main__"] = module
    code = compile(Path(path).read_text(), path, "exec")
    exec(code, module.__dict__)  # the script's guarded main block does not run here


def main(payload_path: str, node: int, result_path: str) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    payload = pickle.loads(Path(payload_path).read_bytes())
    _load_main(payload["main_path"])
    job = pickle.loads(payload["job"])
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    method = start_method(threads)
    if method == "fork":
        before_fork()
    config = LaunchConfig(
        min_nodes=job["nodes"],
        max_nodes=job["nodes"],
        nproc_per_node=job["per_node"],
        run_id=job["run_id"],
        rdzv_backend="c10d",
        rdzv_endpoint=job["endpoint"],
        rdzv_configs={"is_host": node == 0, "timeout": int(job["timeout"])},
        max_restarts=job.get("max_restarts", 0),
        monitor_interval=0.05,
        start_method=method,
        local_addr=node_address(node),
    )
    outcome: dict[str, object]
    try:
        with quiet_elastic_agent(threads):
            results = elastic_launch(config, process_main)(job["fn"], job["groups"],
                                                           job["timeout"], job["args"])
        outcome = {"results": dict(results), "failures": []}
        code = 0
    except ChildFailedError as error:
        outcome = {"results": {}, "failures": failure_lines(error.failures, f" (node {node})")}
        code = 1
    except Exception as error:  # rendezvous and store errors: name the node
        outcome = {"results": {}, "failures": [f"node {node}: {type(error).__name__}: {error}"]}
        code = 1
    Path(result_path).write_bytes(pickle.dumps(outcome))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
