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


def os_error_message(exc: OSError) -> str | None:
    """The one line of an OSError a user can act on (disk full, file too large, permission
    denied, a read-only file system); None for any other (a bug)."""
    import errno

    name = f" {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return (f"disk full while writing{name}: free space and rerun; outputs are written "
                "whole or not at all")
    if exc.errno == errno.EFBIG:
        return (f"file too large while writing{name}: over the file system's or the "
                "process's size limit (ulimit -f)")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = "read-only file system" if exc.errno == errno.EROFS else "permission denied"
        return f"can't write {exc.filename or 'an output'}: {what}; nothing else was changed"
    return None
