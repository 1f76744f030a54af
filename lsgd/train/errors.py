"""The error of a person's mistake, in a module that imports nothing else.

The command line catches it (exit code 2, the message, no traceback) before it has
imported torch, so it cannot live beside the code that raises it most
(:mod:`lsgd.train.build`, which re-exports it).
"""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in the command line or the environment, reported without a traceback."""
