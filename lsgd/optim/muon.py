"""Muon for the matrices, AdamW for the rest, as one optimizer a strategy drives.

``torch.optim.Muon`` (momentum orthogonalized by Newton-Schulz steps) takes 2-D parameters
only: :class:`MuonAdamW` gives it every 2-D weight outside an embedding and AdamW the rest
(embeddings, biases, norms), as MuLoCo and Muon's authors do. Muon's step is scaled to
AdamW's update size (``adjust_lr_fn="match_rms_adamw"``), so one learning rate serves both.
The inner optimizers' groups are this one's ``param_groups`` (the same dictionaries, so a
learning-rate scheduler reaches both); ``state_dict`` holds both.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


class _BothStates(ChainMap[Any, Any]):
    """``optimizer.state`` over both optimizers: reads see either, ``pop`` forgets in both."""

    def __getitem__(self, key: Any) -> Any:
        # not ChainMap's: a read of a missing key must not add it to a defaultdict state
        for state in self.maps:
            if key in state:
                return state[key]
        raise KeyError(key)

    def pop(self, key: Any, *default: Any) -> Any:
        found = [state.pop(key) for state in self.maps if key in state]
        if found:
            return found[0]
        if default:
            return default[0]
        raise KeyError(key)


def split_parameters(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(Muon's parameters: the 2-D weights outside embeddings, AdamW's: all the others)."""
    embedded = {id(p) for m in model.modules() if isinstance(m, nn.Embedding)
                for p in m.parameters(recurse=False)}
    trainable = [p for p in model.parameters() if p.requires_grad]  # a tied weight once
    matrices = [p for p in trainable if p.ndim == 2 and id(p) not in embedded]
    return matrices, [p for p in trainable if p.ndim != 2 or id(p) in embedded]


class MuonAdamW(torch.optim.Optimizer):
    """Muon (``torch.optim.Muon``) on ``model``'s matrices, AdamW on the rest (see the
    module text), with one learning rate ``lr`` and decoupled ``weight_decay`` for both;
    ``momentum`` is Muon's Nesterov momentum (torch's default 0.95)."""

    def __init__(self, model: nn.Module, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95) -> None:
        matrices, rest = split_parameters(model)
        if not matrices:
            raise ValueError("MuonAdamW: the model has no 2-D weight outside an embedding "
                             "for Muon; use AdamW")
        self.muon = torch.optim.Muon(matrices, lr=lr, weight_decay=weight_decay,
                                     momentum=momentum, adjust_lr_fn="match_rms_adamw")
        self.adamw = torch.optim.AdamW(rest, lr=lr, weight_decay=weight_decay) if rest else None
        self._inner = [o for o in (self.muon, self.adamw) if o is not None]
        super().__init__(matrices + rest, {"lr": lr})
        self._link()

    def _link(self) -> None:
        """Share the inner optimizers' groups and states (again after a load, which
        replaces them)."""
        self.param_groups = [g for o in self._inner for g in o.param_groups]
        self.state = _BothStates(*(o.state for o in self._inner))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for optimizer in self._inner:
            optimizer.step()
        return loss

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        return {"muon": self.muon.state_dict(),
                "adamw": self.adamw.state_dict() if self.adamw else None}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:  # type: ignore[override]
        self.muon.load_state_dict(state_dict["muon"])
        if self.adamw is not None:
            self.adamw.load_state_dict(state_dict["adamw"])
        self._link()
