"""A lost worker and a bad checkpoint lose nothing (lsgd train's checkpoints and restarts).

* a worker SIGKILLed mid-run (``--fault kill:RANK:STEP``) under ``lsgd train
  --restarts 1`` and under ``torchrun --max-restarts 1``: the job restarts from
  the latest checkpoint, redoes at most one checkpoint interval, records it,
  and ends with exactly the model of an uninterrupted run;
* the last two complete checkpoints are kept; a truncated latest one is set
  aside with a warning and the previous one used; a half-written one (a kill
  while writing) is ignored; with no usable one the error names the files.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from lsgd.cli import main
from lsgd.train import checkpoint, runner
from lsgd.train.config import make_config
from lsgd.train.outputs import read_csv

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 20
RUN = dict(dataset="digits", model="mlp", workers=2, steps=100, checkpoint_every=INTERVAL,
           period=4, eval_every="50", quiet=True, seed=3)


def _train(out: Path, **settings: Any) -> dict[str, Any]:
    cfg = make_config({**RUN, "out": str(out), **settings})
    summary = runner.train(cfg)
    assert summary is not None
    return summary


def _models(run: Path, workers: int = 2) -> list[dict[str, torch.Tensor]]:
    latest = checkpoint.complete(run)[0]
    return [torch.load(latest.file(r), weights_only=True)["model"] for r in range(workers)]


def _same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return all(torch.equal(x[k], y[k]) for x, y in zip(a, b) for k in x)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("straight") / "run"
    return _train(out), out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_worker_is_restarted_from_the_last_checkpoint(
        tmp_path: Path, uninterrupted: tuple[dict[str, Any], Path]) -> None:
    straight, straight_run = uninterrupted
    summary = _train(tmp_path / "run", restarts=1, fault=["kill:1:50"])
    assert summary["restarts"] == 1
    [event] = summary["resumes"]
    assert event["kind"] == "restart" and event["from_step"] == 40, event
    # The summary covers the whole run, both attempts: more wall time than training time.
    assert summary["wall_seconds"] > summary["train_seconds"]
    # Killed before its step 50: rank 0 got at most to the round of step 52.
    assert 0 < summary["steps_redone"] <= INTERVAL, event
    assert summary["steps"] == 100
    # The same seed, data order and random states: nothing of the kill is left.
    assert summary["test_accuracy"] == pytest.approx(straight["test_accuracy"], abs=0.01)
    assert _same(_models(tmp_path / "run"), _models(straight_run))
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["restarts"] == 1 and written["steps_redone"] == summary["steps_redone"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_restarts_a_killed_worker_from_the_last_checkpoint(
        tmp_path: Path, uninterrupted: tuple[dict[str, Any], Path]) -> None:
    straight, straight_run = uninterrupted
    out = tmp_path / "run"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in RUN.items()
             if k not in ("workers", "quiet")]
    command_line = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", "2", "--max-restarts", "1", "-m", "lsgd", "train",
                    *flags, "--quiet", "--fault", "kill:0:50", "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(command_line, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restart 1: continuing from step-00000040" in done.stderr, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["restarts"] == 1 and 0 < summary["steps_redone"] <= INTERVAL, summary
    assert summary["test_accuracy"] == pytest.approx(straight["test_accuracy"], abs=0.01)
    assert _same(_models(out), _models(straight_run))


@pytest.mark.timeout(300)
def test_two_checkpoints_are_kept_and_a_truncated_latest_one_falls_back(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    _train(run, steps=60, backend="threads")
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*")) == [
        "step-00000040", "step-00000060"]
    victim = run / "checkpoints" / "step-00000060" / "rank-1.pt"
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    # A kill while the next checkpoint was being written: files, no meta.json.
    half = run / "checkpoints" / "step-00000080"
    half.mkdir()
    (half / "rank-0.pt").write_bytes(b"partial")
    (half / ".rank-1.pt.tmp-123").write_bytes(b"partial")
    assert [c.steps for c in checkpoint.complete(run)] == [60, 40]
    capfd.readouterr()
    summary = _train(run, steps=80, backend="threads", resume=str(run))
    err = capfd.readouterr().err
    assert "checkpoint step-00000060 is not usable: " in err and "(truncated?)" in err, err
    assert "set aside" in err and "(worker(s) 1)" in err, err
    assert summary["resumes"][-1]["from_step"] == 40
    assert summary["steps"] == 80
    assert (run / "checkpoints" / "unusable" / "step-00000060" / "rank-1.pt").exists()
    assert [c.steps for c in checkpoint.complete(run)][:2] == [80, 60]


def test_no_usable_checkpoint_is_an_error_naming_the_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    _train(run, steps=40, backend="threads")
    for complete in checkpoint.complete(run):
        path = complete.file(0)
        data = bytearray(path.read_bytes())
        data[100] ^= 0xFF  # one flipped bit: the same size, another checksum
        path.write_bytes(bytes(data))
    assert main(["train", "--resume", str(run), "--steps", "60"]) == 2
    err = capsys.readouterr().err
    assert "no usable checkpoint" in err and "Traceback" not in err, err
    for steps in (20, 40):
        assert f"step-{steps:08d}/rank-0.pt does not match its SHA-256" in err, err


# -- a diverging worker --------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_worker_with_a_nan_loss_is_reset_and_never_leads_while_diverged(tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = _train(run, workers=4, steps=120, eval_every="60", backend="threads",
                     fault=["nan:1:30"])
    assert summary["worker_resets"] == [0, 1, 0, 0]
    # Clean, the same run reaches 0.984; chance is 0.1.
    assert summary["test_accuracy"] >= 0.95, summary
    rows = read_csv(run / "metrics.csv")
    assert all(math.isfinite(r["train_loss"]) for r in rows)
    elections = read_csv(run / "leader_history.csv")
    # NaN from step 30; the round of step 32 resets it: it is not elected there.
    assert [e["leader"] for e in elections if 30 <= e["step"] <= 32] != []
    assert all(e["leader"] != 1 for e in elections if 30 <= e["step"] <= 32)


def test_when_every_worker_diverges_the_run_stops_and_keeps_its_last_good_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    code = main(["train", "--dataset", "digits", "--model", "mlp", "--workers", "2",
                 "--backend", "threads", "--steps", "100", "--period", "4",
                 "--checkpoint-every", "20", "--quiet", "--out", str(run),
                 "--fault", "nan:0:30", "--fault", "nan:1:30"])
    err = capsys.readouterr().err
    assert code == 1 and "training diverged" in err and "Traceback" not in err, err
    assert [c.steps for c in checkpoint.complete(run)] == [20]
    assert all(torch.isfinite(v).all() for m in _models(run) for v in m.values())


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault,every,answer", [
    ("kill:1:50", 0, "restart 1 from step 0"),
    # The only checkpoint (step 40) truncated: nothing to fall back to but the start.
    ("corrupt-checkpoint:50", 40, "fell back to step 0 (step-00000040 unusable)")])
def test_a_worker_killed_before_the_first_checkpoint_restarts_from_step_0_and_says_so(
        tmp_path: Path, fault: str, every: int, answer: str) -> None:
    summary = _train(tmp_path / "run", restarts=1, fault=[fault], checkpoint_every=every)
    assert answer in (tmp_path / "run" / "faults.csv").read_text()
    assert summary["restarts"] == 1
    [event] = summary["resumes"]
    assert event["kind"] == "restart" and event["from_step"] == 0 and event["checkpoint"] is None
    # Killed before its step 50: rank 0 got to the round of step 48 or 52, all redone.
    assert 40 <= summary["steps_redone"] <= 56, event
    assert summary["steps"] == 100


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restartable_run_rides_out_one_fault_of_each_worker_kind(tmp_path: Path) -> None:
    """A hung worker, a NaN, a crash by signal, a corrupt newest checkpoint and a kill in
    one restartable run of 4 processes: it finishes, and faults.csv says what each did."""
    summary = _train(tmp_path / "run", workers=4, steps=160, checkpoint_every=16,
                     eval_every="80", restarts=3, timeout=30,
                     fault=["stop:1:20:2", "nan:3:30", "segv:2:44", "corrupt-checkpoint:70",
                            "kill:1:100"])
    assert summary["restarts"] == 3 and summary["faults"] == 5, summary
    assert summary["fatal_faults"] == 3 and summary["steps"] == 160, summary
    assert summary["test_accuracy"] > 0.9, summary
    rows = {line.split(",")[1]: line.split(",", 6)[6].rsplit(",", 1)[0] for line in
            (tmp_path / "run" / "faults.csv").read_text().splitlines()[1:]}
    assert rows["stop"] == "waited" and rows["nan"].startswith("reset worker 3"), rows
    assert rows["segv"] == "restart 1 from step 32", rows
    assert rows["corrupt-checkpoint"] == ("restart 2 from step 48; fell back to step-00000048 "
                                          "(step-00000064 unusable)"), rows
    assert rows["kill"] == "restart 3 from step 96", rows
    assert "exitcode: -11" in "".join(p.read_text() for p in (tmp_path / "run" / "logs")
                                      .glob("agent-*.log"))  # the agents' logs are kept
