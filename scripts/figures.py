"""Draw every figure of docs/figures that a page owns again from the records in records/
(see studies/records.py); trains nothing. Names the PNGs no page shows.

    python scripts/figures.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # studies/, beside lsgd

from studies import records

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    figures = ROOT / "docs" / "figures"
    with tempfile.TemporaryDirectory() as scratch:
        drawn = records.draw_figures(ROOT, figures, Path(scratch))
    for name, lines in drawn.items():
        print(f"docs/figures/{name}: " + ("; ".join(lines) or "the benchmark's own figure"))
    for path in sorted(figures.glob("*.png")):
        if path.name not in records.shown(ROOT):
            print(f"docs/figures/{path.name}: shown by no page (remove it)")
