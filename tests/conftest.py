"""Fixtures shared by several test files."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsgd.train.config import TrainConfig
from tests.train.test_bad_input import CONFIGS, FASHION_FILES


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Config files, broken datasets, a regular file and a run to resume, in ``tmp_path``."""
    for name, text in CONFIGS.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "two.txt").write_text("0 1\n2 3\n")  # 4 workers, two parts
    (tmp_path / "cifar").mkdir()
    (tmp_path / "cifar" / "data_batch_1").write_bytes(b"")
    (tmp_path / "fashion").mkdir()
    for name in FASHION_FILES:
        (tmp_path / "fashion" / name).write_bytes(b"")
    (tmp_path / "file").write_text("not a folder\n")
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "binary.bin").write_bytes(b"abc\0def")
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 au lait\n".encode("latin-1"))
    (tmp_path / "short.txt").write_text("In the beginning.\n" * 40)
    run = tmp_path / "run"
    run.mkdir()
    saved = TrainConfig(method="lsgd", model="mlp", dataset="synthetic", workers=2, groups=1,
                        out=str(run))
    (run / "config.toml").write_text(saved.to_toml())
    (run / "metrics.csv").write_text("step\n")
    return tmp_path
