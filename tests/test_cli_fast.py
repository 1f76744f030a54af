"""The command line refuses a mistake before it imports torch (so in a fraction of a
second), and the torch-free tables it reads are the ones the torch modules use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Prints the exit code of ``lsgd ARGS...`` and whether torch (or numpy) was imported.
PROBE = """
import sys
from lsgd.cli import main
code = main(sys.argv[1:])
print("exit", code, "torch" in sys.modules, "numpy" in sys.modules)
"""


def _refused(args: list[str]) -> tuple[int, bool, bool, str]:
    """Run ``lsgd ARGS`` in a fresh interpreter: (exit code, torch imported, numpy
    imported, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)
    words = done.stdout.split()
    assert words[:1] == ["exit"], done.stdout + done.stderr
    return int(words[1]), words[2] == "True", words[3] == "True", done.stderr


@pytest.mark.parametrize("args,message", [
    (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["train", "--method", "nope"], "--method 'nope': choose one of lsgd"),
    (["train", "--method", "lsgd,nope"], "--method 'nope': choose one of lsgd"),
    (["train", "--compress", "zip"], "invalid choice: 'zip'"),
    (["train", "--target", "2"], "--target 2.0: a test accuracy in (0, 1]"),
    (["bench", "nope"], "invalid choice: 'nope'"),
    (["bench", "volume", "--sets", "elastic"], "--sets: a flag of chaos, not of volume"),
    (["repro", "nope"], "invalid choice: 'nope'"),
    (["plot", "--metric", "nope", "run"], "invalid choice: 'nope'"),
], ids=["flag", "method", "methods", "choice", "target", "bench", "bench-flag", "repro",
        "plot"])
def test_a_mistake_is_refused_before_torch_is_imported(args: list[str], message: str) -> None:
    code, torch, numpy, err = _refused(args)
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err
    assert not torch, f"lsgd {' '.join(args)} imported torch before refusing it"
    assert not numpy, f"lsgd {' '.join(args)} imported numpy before refusing it"


def test_python_m_lsgd_imports_no_torch_for_a_bad_flag() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "lsgd", "train",
                           "--no-such-flag"], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")]
    assert "lsgd.cli" in imported
    assert not [name for name in imported if name.split(".")[0] in ("torch", "numpy")]


def test_import_lsgd_is_lazy_and_complete() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = ("import sys, lsgd; lazy = 'torch' not in sys.modules; "
             "names = [getattr(lsgd, n) for n in lsgd.__all__]; "
             "from lsgd import LSGD, topology; "
             "print(lazy, set(lsgd.__all__) <= set(dir(lsgd)), LSGD.name, "
             "lsgd.topology is topology, lsgd.__version__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    lazy, listed, name, same, version = done.stdout.split()
    assert (lazy, listed, name, same) == ("True", "True", "lsgd", "True")
    assert version.count(".") == 2


def test_the_torch_free_tables_are_the_ones_the_torch_modules_use() -> None:
    from lsgd import names
    from lsgd.comm import codec, info
    from lsgd.data import TEXT_DATASETS
    from lsgd.models.gpt import LANGUAGE_MODELS
    from lsgd.registry import strategy_names
    from lsgd.comm import sparse
    from lsgd.strategies import buffers, lsgd as lsgd_module
    from lsgd.strategies.stages import eager, land, leader_force, options

    assert codec.CODECS is names.CODECS and info.REPLICAS is names.REPLICAS
    assert buffers.MODES is names.BN_MODES and land.MERGES is names.MERGES
    assert leader_force.LEADERS is names.LEADERS and eager.OUTERS is names.OUTERS
    assert options.ROUND_CODECS is names.ROUND_CODECS and sparse.VALUES is names.SPARSE_VALUES
    assert lsgd_module.SCOPE_PULLS is names.SCOPE_PULLS
    assert TEXT_DATASETS is names.TEXT_DATASETS and LANGUAGE_MODELS is names.LANGUAGE_MODELS
    assert tuple(strategy_names()) == names.METHODS


def test_the_removed_sync_buffers_setting_names_its_replacement(tmp_path: Path) -> None:
    from lsgd.train.config import make_config
    from lsgd.train.tomlfile import read_toml

    with pytest.raises(ValueError, match='sync_buffers = false is no longer a setting; '
                                         'write bn_buffers = "local" instead'):
        make_config({"sync_buffers": False})
    (tmp_path / "off.toml").write_text("sync-buffers = false\n")
    with pytest.raises(ValueError, match=f'{tmp_path / "off.toml"}: sync_buffers = false is '
                                         'no longer a setting; write bn_buffers = "local"'):
        read_toml(tmp_path / "off.toml")
    # The config.toml of a run trained before it went holds sync_buffers = true, the
    # default: it still resumes, read as if the line were not there.
    (tmp_path / "old.toml").write_text('method = "easgd"\nsync_buffers = true\n')
    assert read_toml(tmp_path / "old.toml") == {"method": "easgd"}
    assert make_config({"sync_buffers": True}) == make_config({})
