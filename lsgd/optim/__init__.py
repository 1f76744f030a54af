from lsgd.optim.lars import LARS, lars_param_groups
from lsgd.optim.muon import MuonAdamW

__all__ = ["LARS", "MuonAdamW", "lars_param_groups"]
