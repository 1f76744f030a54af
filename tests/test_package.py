"""The wheel a user installs holds the package alone: lsgd/, none of the studies, the
records or the docs' tooling, and the command it names."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_the_wheel_holds_the_package_and_no_study(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path)],
                          capture_output=True, text=True, timeout=110)
    if done.returncode and "No module named pip" in done.stderr:
        pytest.skip("pip is not installed in this interpreter")
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("lsgd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not n.startswith(("lsgd/", "lsgd-"))]
    assert outside == [], outside
    assert not [n for n in names if "studies" in n or "records" in n or n.startswith("lsgd/bench/records")]
    expected = {f"lsgd/{p.relative_to(REPO / 'lsgd').as_posix()}"
                for p in (REPO / "lsgd").rglob("*.py")}
    assert expected <= set(names), sorted(expected - set(names))[:5]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "lsgd = lsgd.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
