from lsgd.optim.lars import LARS, lars_param_groups

__all__ = ["LARS", "lars_param_groups"]
