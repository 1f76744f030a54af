"""lsgd: communication-efficient distributed training for PyTorch.

Leader SGD (single- and multi-leader) and its baselines (EASGD, local SGD,
DiLoCo, all-reduce data parallel, independent SGD, the LARS optimizer) and the
decentralized family (D-PSGD, MATCHA, AL-DSGD on graphs from ``lsgd.topology``),
running on torch.distributed (gloo or NCCL, launched with torchrun) or in an in-process
simulator with the same strategy code.
"""

from lsgd.comm import (
    CommStats,
    CommunicationError,
    Communicator,
    SimulationError,
    WorkerInfo,
    get_communicator,
    simulate,
    worker_info,
)
from lsgd.comm.elastic import ElasticCommunicator
from lsgd.launcher import LaunchError, launch
from lsgd.launcher.elastic import launch_elastic
from lsgd.optim import LARS, MuonAdamW, lars_param_groups
from lsgd.strategies import EASGD, LSGD, AllReduce, Independent, LocalSGD, Strategy
from lsgd.strategies import ALDSGD, DPSGD, MATCHA, Decentralized, DiLoCo, DivergedError, Report
from lsgd.registry import make_strategy, strategy_names
from lsgd import topology
from lsgd.topology import Topology

__version__ = "0.10.0"

__all__ = [
    "ALDSGD",
    "AllReduce",
    "CommStats",
    "CommunicationError",
    "Communicator",
    "DPSGD",
    "Decentralized",
    "DiLoCo",
    "DivergedError",
    "EASGD",
    "ElasticCommunicator",
    "Independent",
    "LaunchError",
    "LARS",
    "LSGD",
    "LocalSGD",
    "MATCHA",
    "MuonAdamW",
    "Report",
    "SimulationError",
    "Strategy",
    "Topology",
    "WorkerInfo",
    "get_communicator",
    "lars_param_groups",
    "launch",
    "launch_elastic",
    "make_strategy",
    "simulate",
    "strategy_names",
    "topology",
    "worker_info",
]
