"""What the integration tests share."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _environment_kept() -> Iterator[None]:
    """The trainer sets the launcher's variables (MASTER_PORT, ...) in this process; the
    tests that run after a module must not find them."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
