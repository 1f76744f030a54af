"""The error of a person's mistake, in a module that imports nothing else: the command line
catches it (exit code 2, the message, no traceback) before it has imported torch."""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in the command line or the environment, reported without a traceback."""
