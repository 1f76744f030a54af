"""One file per method; every strategy wraps a user's model and optimizer."""

from lsgd.strategies.aldsgd import ALDSGD
from lsgd.strategies.allreduce import AllReduce
from lsgd.strategies.strategy import Strategy
from lsgd.strategies.health import DivergedError
from lsgd.strategies.decentralized import Decentralized
from lsgd.strategies.demo import DeMo
from lsgd.strategies.diloco import DiLoCo
from lsgd.strategies.dpsgd import DPSGD
from lsgd.strategies.easgd import EASGD
from lsgd.strategies.independent import Independent
from lsgd.strategies.local_sgd import LocalSGD
from lsgd.strategies.lsgd import LSGD
from lsgd.strategies.matcha import MATCHA
from lsgd.strategies.muloco import MuLoCo
from lsgd.strategies.report import Report
from lsgd.strategies.sparseloco import SparseLoCo

__all__ = [
    "ALDSGD", "AllReduce", "DPSGD", "Decentralized", "DeMo", "DiLoCo", "DivergedError",
    "EASGD", "Independent", "LSGD", "LocalSGD", "MATCHA", "MuLoCo", "Report", "SparseLoCo",
    "Strategy"]
