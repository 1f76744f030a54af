"""lsgd: communication-efficient distributed training for PyTorch.

Leader SGD and its baselines, the sparse and the decentralized methods, on
torch.distributed or in an in-process simulator with the same strategy code. The
public names are imported on first use (PEP 562), so ``import lsgd`` does not pay for
torch until a name that needs it is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.17.0"

#: Each public name, and the module it comes from.
_SOURCES: dict[str, str] = {
    **dict.fromkeys(("CommStats", "CommunicationError", "Communicator", "SimulationError",
                     "WorkerInfo", "get_communicator", "simulate", "worker_info"), "lsgd.comm"),
    "ElasticCommunicator": "lsgd.comm.elastic_collectives",
    **dict.fromkeys(("LaunchError", "launch"), "lsgd.launcher"),
    "launch_elastic": "lsgd.launcher.elastic_jobs",
    "plan": "lsgd.planner.planning",
    **dict.fromkeys(("LARS", "MuonAdamW", "lars_param_groups"), "lsgd.optim"),
    **dict.fromkeys(("ALDSGD", "AllReduce", "DPSGD", "Decentralized", "DeMo", "DiLoCo",
                     "DivergedError", "EASGD", "Independent", "LSGD", "LocalSGD", "MATCHA",
                     "MuLoCo", "Report", "SparseLoCo", "Strategy"), "lsgd.strategies"),
    **dict.fromkeys(("make_strategy", "strategy_names"), "lsgd.registry"),
    "Topology": "lsgd.topology"}
#: Subpackages offered as attributes of ``lsgd`` (``lsgd.topology.ring(8)``).
_SUBMODULES = ("topology",)

__all__ = sorted([*_SOURCES, *_SUBMODULES], key=str.lower)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then cached here)."""
    if name in _SUBMODULES:
        value: Any = importlib.import_module(f"lsgd.{name}")
    elif name in _SOURCES:
        value = getattr(importlib.import_module(_SOURCES[name]), name)
    else:
        raise AttributeError(f"module 'lsgd' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and IDEs see: the names themselves
    from lsgd import topology
    from lsgd.comm import (CommStats, CommunicationError, Communicator, SimulationError,
                           WorkerInfo, get_communicator, simulate, worker_info)
    from lsgd.comm.elastic_collectives import ElasticCommunicator
    from lsgd.launcher import LaunchError, launch
    from lsgd.launcher.elastic_jobs import launch_elastic
    from lsgd.optim import LARS, MuonAdamW, lars_param_groups
    from lsgd.registry import make_strategy, strategy_names
    from lsgd.strategies import (ALDSGD, DPSGD, EASGD, LSGD, MATCHA, AllReduce, Decentralized,
                                 DeMo, DiLoCo, DivergedError, Independent, LocalSGD, MuLoCo,
                                 Report, SparseLoCo, Strategy)
    from lsgd.topology import Topology
