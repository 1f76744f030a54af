"""The defaults of ``lsgd train`` per task and method, where a method's best value of a
shared setting differs from the task's default.

``--lr``, ``--period`` and ``--outer-lr`` are shared by every method, but their best values
are not. For a task in :data:`TUNED` a run takes its method's entries for every setting it
does not give (the command line and the TOML file win); the task's own defaults (for text,
:data:`lsgd.train.config.TEXT_DEFAULTS`) come first. Tasks: ``text`` (``--dataset kjv`` or
``text``) and ``cnn7`` (``--model cnn7``); any other task keeps the fields' defaults.

The entries and their evidence (docs/train.md, "Tuned defaults"): DiLoCo's outer learning
rate 0.35 rather than the paper's 0.7, on both tasks (CNN7: 86.4% against 85.2% at equal
steps, two seeds; the language model: 2.29 against 2.36 nats/byte, the study
``python studies/equal_tokens.py diloco-screen``). On text, all-reduce, DiLoCo and LSGD
take lr 0.002 rather than the text default 0.001 (300 equal steps, three seeds,
``python studies/equal_tokens.py equal-tokens``: all-reduce 1.94 against 2.15, DiLoCo
2.21 against 2.28, LSGD 2.21 against 2.28); local SGD keeps 0.001 (2.32 against 2.28 on
the screen's seed). These hold at ``lsgd train``'s period of 16; with int8 rounds every
32 steps every periodic method is best at lr 0.001 (``python studies/tuning.py``,
docs/studies.md section 10). MuLoCo takes lr 0.004 on text: at the default budget
(300 steps of 16 windows) it ends at 1.83 nats/byte, below all-reduce's 1.94 at 130x
fewer bytes, the best of the communication-efficient methods there (the tuning
study's seed 0; docs/studies.md section 11). A test checks that the studies'
pinned points are these.
"""

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


def task_of(settings: dict[str, Any]) -> str | None:
    """The tuned task a run's settings belong to, if any."""
    if is_language(str(settings.get("dataset", ""))):
        return "text"
    if str(settings.get("model", "")).lower() == "cnn7":
        return "cnn7"
    return None


def defaults(settings: dict[str, Any], method: str) -> dict[str, Any]:
    """The settings ``method`` needs (:data:`METHOD`), then its tuned ones on the task of
    ``settings`` (empty if none)."""
    task = task_of(settings)
    return {**METHOD.get(method, {}), **(TUNED.get(task, {}).get(method, {}) if task else {})}
