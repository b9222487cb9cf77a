"""Exceptions that carry a message meant for the user.

The CLI turns a :class:`PairkitError` into one line on stderr and exit code 1;
anything else is a bug.
"""

from __future__ import annotations


class PairkitError(Exception):
    """An expected failure (bad input, missing weights, ...) with a one-line reason."""


class StoreError(PairkitError):
    """A store is missing, half-written or inconsistent."""


class UsageError(PairkitError):
    """Options that contradict each other or values out of range (exit code 2)."""

    exit_code = 2


def check(condition: bool, message: str) -> None:
    """Raise :class:`UsageError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise UsageError(message)
