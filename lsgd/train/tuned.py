"""The defaults of ``lsgd train`` per task and method, chosen by ``lsgd bench tuning``.

``--lr``, ``--batch-size``, ``--period`` and the methods' own knobs are shared by
every method, but their best values are not. For a task in :data:`TUNED` a run takes
the chosen point of its method for every setting it does not give (the command line
and the TOML file win). The points are the ones the tuning records chose
(records/tuning/tuning.json; a test checks that the two agree): 4 workers as 4 nodes,
300 steps of 16 windows (the language model) or 128 images (CNN7), int8 rounds for the
periodic methods. Tasks: ``text`` (``--dataset kjv`` or ``text``, lsgd's GPT) and
``cnn7`` (``--model cnn7``); any other task keeps the fields' defaults.
"""

from __future__ import annotations

from typing import Any

#: task -> method -> setting -> value.
TUNED: dict[str, dict[str, dict[str, Any]]] = {
    "text": {},
    "cnn7": {},
}
#: The tuning benchmark's task of each table.
TUNING_TASK = {"text": "language", "cnn7": "cnn7"}


def task_of(settings: dict[str, Any], text_datasets: tuple[str, ...]) -> str | None:
    """The tuned task a run's settings belong to, if any."""
    if str(settings.get("dataset", "")).lower() in text_datasets:
        return "text"
    if str(settings.get("model", "")).lower() == "cnn7":
        return "cnn7"
    return None


def defaults(settings: dict[str, Any], text_datasets: tuple[str, ...], method: str
             ) -> dict[str, Any]:
    """The tuned settings of ``method`` on the task of ``settings`` (empty if none)."""
    task = task_of(settings, text_datasets)
    return dict(TUNED.get(task, {}).get(method, {})) if task else {}
