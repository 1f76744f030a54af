"""One file per method; every strategy wraps a user's model and optimizer."""

from lsgd.strategies.allreduce import AllReduce
from lsgd.strategies.base import Strategy
from lsgd.strategies.easgd import EASGD
from lsgd.strategies.independent import Independent
from lsgd.strategies.local_sgd import LocalSGD
from lsgd.strategies.lsgd import LSGD

__all__ = ["AllReduce", "EASGD", "Independent", "LSGD", "LocalSGD", "Strategy"]
