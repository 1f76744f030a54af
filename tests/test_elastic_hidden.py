"""Elastic training with hidden rounds: overlapped and compressed rounds of DiLoCo and LSGD
survive a killed worker; the transfer in flight when it dies is dropped, the round not
committed, and the worker rejoins from a live peer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_elastic import PERIOD, _job, _steps, needs_torchft


def _hidden_job(method: str, knobs: dict[str, Any], faults: list[tuple[Any, ...]],
                tmp: Path, steps: int) -> list[Any]:
    """An elastic run decides at each round's landing: ``steps`` is a landing step."""
    return _job(method, faults, tmp, extra=knobs, steps=steps)


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method, knobs", [
    ("diloco", {"overlap": 2, "compress": "int8"}),
    ("lsgd", {"overlap": 2, "compress": "int8"}),
])
def test_a_hidden_compressed_round_survives_a_kill(tmp_path: Path, method: str,
                                                   knobs: dict[str, Any]) -> None:
    """Worker 1 dies one step after a round started (its transfer in flight): the
    others' round fails and is dropped, they train on without a restart, and worker 1,
    restarted by its agent, rejoins within two rounds."""
    died, steps = 2 * PERIOD + 1, 11 * PERIOD + 2  # rounds land 2 steps after they start
    records = _hidden_job(method, knobs, [("kill", 1, died)], tmp_path, steps)
    for slot in (0, 2):
        record = records[slot]
        assert record["attempt"] == 0 and _steps(record) == list(range(1, steps + 1))
        assert record["failed_rounds"] >= 1  # the round in flight when worker 1 died
    joined = records[1]
    assert joined["attempt"] == 1 and joined["heals"] == 1
    assert _steps(joined)[0] <= died + 2 * PERIOD
    assert all(r["steps"] == steps for r in records)
    assert min(r["accuracy"] for r in records) > 0.8


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hidden_diloco_in_fragments_survives_a_kill(tmp_path: Path) -> None:
    steps = 11 * PERIOD + PERIOD // 2 + 1  # the first part's round, landed a step later
    records = _hidden_job("diloco", {"overlap": 1, "fragments": 2}, [("kill", 2, 30)],
                          tmp_path, steps)
    assert [r["attempt"] for r in records] == [0, 0, 1]
    assert all(r["steps"] == steps for r in records)
    assert min(r["accuracy"] for r in records) > 0.8
