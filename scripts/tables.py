"""Rewrite every marked benchmark table of README.md and docs/ (records.PAGES) from the
records in records/ (see studies/records.py); trains nothing.

    python scripts/tables.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # studies/, beside lsgd

from studies import records

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        for page in records.PAGES:
            changed = records.refresh(ROOT / page, ROOT, Path(scratch))
            print(f"{page}: {changed} table(s) rewritten")
