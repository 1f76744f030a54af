"""The studies beside the package: every study script's command line, one run as a
script from the repository's root, what ``lsgd bench`` offers (the benchmarks a user
runs, and only their flags), and the wheel without the studies."""

from __future__ import annotations

import importlib
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lsgd import cli
from lsgd.bench import NAMES
from studies.common import script

ROOT = Path(__file__).resolve().parents[2]
#: Each study script and its studies (the first runs when the script holds one).
SCRIPTS = {"equal_tokens": ["equal-tokens", "diloco-screen"], "equal_steps": ["equal-steps"],
           "replicas": ["replicas", "replicas-time"], "replica_lab": ["replicas-lab"],
           "quality": ["valley", "leader-force", "eager", "tuned"], "tuning": ["tuning"],
           "aldsgd": ["aldsgd"], "fidelity": ["fidelity"], "regime": ["regime"],
           "regime_gpu": ["regime-gpu"], "plan_check": ["plan-check", "plan-crossing"]}
USERS = {"time-to-accuracy", "twelve-workers", "time-to-loss", "scaling", "volume",
         "overhead", "stragglers", "simulator", "startup", "elastic", "chaos"}


@pytest.mark.parametrize("module", SCRIPTS)
def test_a_study_script_names_its_studies_and_answers_help(
        module: str, capsys: pytest.CaptureFixture[str]) -> None:
    study = script(importlib.import_module(f"studies.{module}"))
    assert list(study.studies) == SCRIPTS[module]
    assert study.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python studies/{module}.py")
    assert f"  python studies/{module}.py " in text  # the commands of its records
    if len(SCRIPTS[module]) > 1:  # the study's name first, one of its own
        assert study.main(["--quick"]) == 2
        assert study.main(["nonsense"]) == 2
        name, _, args, options = study.parse([SCRIPTS[module][-1], "--reuse-only"])
        assert name == SCRIPTS[module][-1] and args.out == "bench-results"
        assert options["reuse"] == "only"


def test_a_study_checks_its_own_flags_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studies import equal_steps, fidelity, replicas

    assert script(fidelity).main(["--sets", "bn,colour", "--out", str(tmp_path)]) == 2
    assert "unknown ['colour']; choose from bn, pull-form, leader-momentum" in (
        capsys.readouterr().err)
    assert script(fidelity).parse(["--sets", "bn"])[3] == {
        "seeds": None, "jobs": None, "sets": ["bn"], "reuse": None}
    assert script(equal_steps).main(["--methods", "adam", "--out", str(tmp_path)]) == 2
    assert script(replicas).main(["replicas-time", "--step-seconds", "0"]) == 2
    assert "give a finite number above 0" in capsys.readouterr().err
    assert script(replicas).main(["replicas", "--seeds", "0"]) == 2
    assert not list(tmp_path.iterdir())


def test_a_study_runs_as_a_script_from_the_repository_root() -> None:
    done = subprocess.run([sys.executable, "studies/tuning.py", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "--top K" in done.stdout and "records/tuning" in done.stdout


def test_lsgd_bench_offers_the_users_benchmarks_and_their_flags_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert set(NAMES) == USERS
    assert cli.main(["bench", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--top", "--tasks", "--device", "--variants"):  # the studies' own
        assert flag not in text, flag
    for study in ("equal-tokens", "equal-steps", "aldsgd", "fidelity", "replicas"):
        assert cli.main(["bench", study]) == 2
        assert "invalid choice" in capsys.readouterr().err
    # a missing record under --reuse-only is a usage error that names it
    assert cli.main(["bench", "stragglers", "--quick", "--reuse-only",
                     "--out", str(tmp_path)]) == 2
    assert "drop --reuse-only to train the missing runs" in capsys.readouterr().err


def test_the_wheel_leaves_the_studies_out() -> None:
    from setuptools import find_packages

    found = re.search(r"\[tool\.setuptools\.packages\.find\]\ninclude = \[([^\]]*)\]",
                      (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml: [tool.setuptools.packages.find] include = [...]"
    include = re.findall(r'"([^"]+)"', found.group(1))
    packages = find_packages(str(ROOT), include=include)
    assert "lsgd.bench" in packages
    assert not [name for name in packages if name.split(".")[0] == "studies"]


@pytest.mark.slow
def test_the_regime_study_gives_each_methods_gap_at_each_budget(tmp_path: Path) -> None:
    """The regime's quick mode (a one-block GPT, two budgets, the first point of every
    grid): a row per method and budget, all-reduce the reference, the gaps and the
    bytes from the runs, and the runs read back on a second call."""
    from studies import regime

    result = regime.run(tmp_path, True, {"jobs": 1})
    assert [row[0] for row in result.rows] == [1] * 8 + [2] * 8
    for row in result.rows:
        assert row[1].split()[0] in regime.GRIDS
        assert ("leader=pull" in row[1]) == (row is result.rows[6] or row is result.rows[14])
        # Muon's share: all-reduce with Muon at MuLoCo's chosen point
        assert ("optimizer=muon" in row[1]) == (row is result.rows[7] or row is result.rows[15])
        if row[1].startswith("allreduce") and "muon" not in row[1]:
            assert row[3] == ""  # the reference
        else:
            gap = float(row[3].rstrip("%"))
            assert math.isfinite(gap) and row[5].endswith("x")
    muloco = next(r[1] for r in result.rows if r[1].startswith("muloco"))
    assert result.rows[7][1] == f"allreduce {muloco.split(' ', 1)[1]} optimizer=muon"
    gaps = result.data["gaps"]
    assert (set(gaps) == {*regime.GRIDS, "leader", "allreduce+muon"}
            and all(len(v) == 2 for v in gaps.values()))
    again = regime.run(tmp_path, True, {"jobs": 1, "reuse": True})
    assert again.rows == result.rows


def test_draw_curves_one_panel_and_several(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from studies.curves import draw_curves

    line = [(1.0, 40.0), (2.0, 20.0), (3.0, 12.0)]
    curves = [(f"method{i}", line, False) for i in range(12)] + [("allreduce, 1gbit", line, True)]
    one = draw_curves([("title", curves)], tmp_path / "one.png", xlabel="s", ylabel="%",
                      target=14.0)
    two = draw_curves([("a", curves[:2]), ("b", curves[2:4])], tmp_path / "sub" / "two.png",
                      xlabel="s", ylabel="%")
    assert one.stat().st_size > 1000 and two.stat().st_size > 1000
    with pytest.raises(ValueError, match="no panel"):
        draw_curves([], tmp_path / "none.png", xlabel="s", ylabel="%")
