"""``lsgd train --method A,B``: the same run once per method, then a table and a figure;
and ``--backend auto``, which models a link this machine cannot shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lsgd.cli import main
from lsgd.links import netns
from lsgd.train import runner

SMALL = ["train", "--dataset", "digits", "--model", "mlp", "--workers", "4", "--groups", "4",
         "--batch-size", "32", "--quiet"]


@pytest.mark.timeout(300)
def test_two_methods_side_by_side_on_a_modeled_link(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    code = main([*SMALL, "--method", "lsgd,allreduce", "--backend", "threads", "--link",
                 "20mbit", "--steps", "40", "--eval-every", "10", "--period", "8",
                 "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    summaries = {m: json.loads((out / m / "summary.json").read_text())
                 for m in ("lsgd", "allreduce")}
    assert {s["method"] for s in summaries.values()} == {"lsgd", "allreduce"}
    assert all(s["steps"] == 40 and s["link"] == "20mbit" for s in summaries.values())
    # The same data, seed and link: all-reduce sends far more, and its clock shows it.
    lsgd, allreduce = summaries["lsgd"], summaries["allreduce"]
    assert allreduce["bytes_sent_per_worker"] > 4 * lsgd["bytes_sent_per_worker"]
    assert allreduce["train_seconds"] > lsgd["train_seconds"]
    table = (out / "comparison.txt").read_text()
    assert table.strip() in printed
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:4]}
    assert set(rows) == {"lsgd", "allreduce"}
    assert float(rows["lsgd"][-2]) == pytest.approx(lsgd["bytes_sent_per_worker"] / 1e6, abs=0.01)
    assert "modeled on the simulator clock" in table
    assert (out / "comparison.png").stat().st_size > 10_000


@pytest.mark.parametrize("args,expected", [
    (["--method", "lsgd,lsgd"], "lsgd given twice"),
    (["--method", "lsgd,sgdd"], "--method 'sgdd': choose one of"),
    (["--method", "lsgd,easgd", "--resume", "runs/x"], "resume one method's run at a time"),
    (["--method", "lsgd,easgd", "--lr", "-1"], "--lr must be"),
], ids=["twice", "unknown", "resume", "bad-setting"])
def test_every_method_is_checked_before_any_trains(args: list[str], expected: str,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--out", str(tmp_path / "cmp"), *args]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


def test_a_dry_run_of_two_methods_prints_both_settings(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--method", "lsgd,easgd", "--dry-run", "--out",
                 str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    assert 'method = "lsgd"' in printed and 'method = "easgd"' in printed
    assert f'out = "{tmp_path / "cmp" / "easgd"}"' in printed
    assert not (tmp_path / "cmp").exists()


def test_backend_auto_models_a_link_that_cannot_be_shaped(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(link: str) -> None:
        raise netns.LinkSetupError("shaped links need root (network namespaces and tc); "
                                   "run as root")

    monkeypatch.setattr(netns, "shaped_links_possible", refuse)
    cfg = runner.resolve_backend(runner.make_config({"backend": "auto", "link": "20mbit"}))
    assert cfg.backend == "threads"
    assert "modeled on the simulator's clock, not shaped (shaped links need root" in \
        capsys.readouterr().err
    monkeypatch.setattr(netns, "shaped_links_possible", lambda link: None)
    assert runner.resolve_backend(runner.make_config(
        {"backend": "auto", "link": "20mbit"})).backend == "processes"
    assert runner.resolve_backend(runner.make_config({"backend": "auto"})).backend == "processes"
