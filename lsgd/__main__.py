"""``python -m lsgd``: the command line (see :mod:`lsgd.cli`)."""

from __future__ import annotations

from lsgd.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
