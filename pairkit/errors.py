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


def allocation_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that failed: a MemoryError (numpy's too), torch's
    OutOfMemoryError (CUDA's), or torch's CPU allocator (a RuntimeError)."""
    text = str(exc)
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "out of memory" in text)


def is_cuda_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation on a CUDA device that failed."""
    return allocation_failed(exc) and "CUDA" in str(exc)


def out_of_memory_message(exc: BaseException) -> str:
    """The one line of an allocation in host memory that failed (:func:`allocation_failed`
    and not :func:`is_cuda_oom`): how much it asked for, when the message says
    (torch's CPU allocator: "you tried to allocate N bytes"; numpy: "Unable to allocate
    11.9 GiB")."""
    import re

    text = str(exc)
    size = ""
    if m := re.search(r"tried to allocate (\d+) bytes", text):
        size = f"can't allocate {int(m.group(1)) / 2**30:,.1f} GiB: "
    elif m := re.search(r"Unable to allocate ([\d.]+ [KMGTP]?i?B)", text):
        size = f"can't allocate {m.group(1)}: "
    return f"out of memory: {size}try a smaller --batch-size or a smaller input"
