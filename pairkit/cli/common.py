"""Shared CLI plumbing: stderr console and error handling.

Data goes to stdout; everything meant for a person goes to stderr.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer

from pairkit.errors import PairkitError

if TYPE_CHECKING:
    from rich.console import Console

_CONSOLE: Console | None = None


def console() -> Console:
    """The stderr console (rich), created on first use."""
    global _CONSOLE
    if _CONSOLE is None:
        from rich.console import Console

        _CONSOLE = Console(stderr=True, highlight=False, soft_wrap=True)
    return _CONSOLE


def say(message: str, quiet: bool = False) -> None:
    """One line for a person, on stderr (silenced by ``--quiet``)."""
    if not quiet:
        console().print(message, markup=False)


def warn(message: str) -> None:
    """A warning line on stderr; never silenced."""
    console().print(f"warning: {message}", markup=False, style="yellow")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on stderr and return the Exit to raise."""
    console().print(f"error: {message}", markup=False, style="red")
    return typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn expected failures into one line on stderr and the right exit code."""
    try:
        yield
    except PairkitError as exc:
        raise fail(str(exc), getattr(exc, "exit_code", 1)) from None
    except MemoryError:
        raise fail("out of memory: try a smaller --batch-size or a smaller input") from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except BrokenPipeError:
        raise  # the reader of stdout went away (`| head`): main() exits quietly
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            name = f" {exc.filename}" if exc.filename else ""
            raise fail(f"disk full while writing{name}: free space and rerun; outputs are "
                       "written whole or not at all") from None
        raise _internal(exc) from None
    except Exception as exc:
        if _is_cuda_oom(exc):
            raise fail("CUDA out of memory: try a smaller --batch-size") from None
        raise _internal(exc) from None


def _internal(exc: Exception) -> typer.Exit:
    if os.environ.get("PAIRKIT_DEBUG"):
        raise exc
    first = str(exc).splitlines()[0] if str(exc) else ""
    return fail(
        f"internal error: {type(exc).__name__}: {first} "
        "(rerun with PAIRKIT_DEBUG=1 for the traceback and report it)"
    )


def _is_cuda_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc)
