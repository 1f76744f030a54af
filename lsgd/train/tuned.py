"""The defaults of ``lsgd train`` per task and method, where a method's best value of a
shared setting (``--lr``, ``--period``, ``--outer-lr``) differs from the task's default: a
run of a task in :data:`TUNED` (``text``: ``--dataset kjv`` or ``text``; ``cnn7``: ``--model
cnn7``) takes its method's entries for every setting it does not give. The studies behind
them: docs/train.md, "Tuned defaults"."""

from __future__ import annotations

from typing import Any

from lsgd.method_options import OPTIONS
from lsgd.tasks.headline import is_language

#: task -> method -> setting -> value, from each method's declaration
#: (:attr:`lsgd.method_options.MethodOptions.tuned`).
TUNED: dict[str, dict[str, dict[str, Any]]] = {}
for _method, _cls in OPTIONS.items():
    for _task, _point in _cls.tuned.items():
        TUNED.setdefault(_task, {})[_method] = _point
#: method -> setting -> value, on every task: what a method needs of the run's settings
#: (:attr:`lsgd.method_options.MethodOptions.requires`: MuLoCo's inner optimizer is Muon,
#: DeMo steps a momentum-free SGD, its momentum its own).
METHOD: dict[str, dict[str, Any]] = {m: cls.requires for m, cls in OPTIONS.items() if cls.requires}
#: The quality studies' task of each table.
STUDY_TASK = {"text": "language", "cnn7": "cnn7"}


def defaults(settings: dict[str, Any], method: str) -> dict[str, Any]:
    """The settings ``method`` needs (:data:`METHOD`), then its tuned ones on the task of
    ``settings`` (empty if none)."""
    task = ("text" if is_language(str(settings.get("dataset", ""))) else
            "cnn7" if str(settings.get("model", "")).lower() == "cnn7" else "")
    return {**METHOD.get(method, {}), **TUNED.get(task, {}).get(method, {})}
