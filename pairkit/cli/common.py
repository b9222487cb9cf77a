"""Shared CLI plumbing: stderr console and error handling.

Data goes to stdout; everything meant for a person goes to stderr.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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

        # emoji=False: a path or a label holding ":fire:" is printed as written
        _CONSOLE = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
    return _CONSOLE


def from_environment(ctx: typer.Context, name: str) -> bool:
    """True when option ``name`` took its value from its environment variable (the user
    did not type it: ``PAIRKIT_RAY_ADDRESS`` set once for every command)."""
    # by name: typer carries its own copy of click, whose enum is not click's
    return getattr(ctx.get_parameter_source(name), "name", None) == "ENVIRONMENT"


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
        raise reader_gone() from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            name = f" {exc.filename}" if exc.filename else ""
            raise fail(f"disk full while writing{name}: free space and rerun; outputs are "
                       "written whole or not at all") from None
        if exc.errno == errno.EFBIG:
            name = f" {exc.filename}" if exc.filename else ""
            raise fail(f"file too large while writing{name}: over the file system's or the "
                       "process's size limit (ulimit -f)") from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            what = "read-only file system" if exc.errno == errno.EROFS else "permission denied"
            raise fail(f"can't write {exc.filename or 'an output'}: {what}; nothing else "
                       "was changed") from None
        raise _internal(exc) from None
    except Exception as exc:
        if _is_cuda_oom(exc):
            raise fail("CUDA out of memory: try a smaller --batch-size") from None
        raise _internal(exc) from None


def reader_gone() -> typer.Exit:
    """The reader of stdout went away (``| head -1``): not an error, as for other Unix
    tools. Stdout is pointed at /dev/null (the final flush would fail again) and the Exit
    to raise is code 0 (Click would turn the BrokenPipeError into exit 1)."""
    import sys

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return typer.Exit(0)


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


def one_line(exc: Any) -> str:
    """A Click usage error as pairkit's one line: ``--keep: 'x' is not one of ...``,
    ``no such option: --foo``, ``missing argument 'STORE'``."""
    from pairkit.cli.options import click_exceptions

    cx = click_exceptions()
    message = exc.format_message() if not isinstance(exc, cx.BadParameter) else exc.message
    if isinstance(exc, cx.BadParameter) and not isinstance(exc, cx.MissingParameter):
        hint = exc.param_hint or (max(exc.param.opts, key=len) if exc.param is not None
                                  and getattr(exc.param, "opts", None) else None)
        if isinstance(hint, (list, tuple)):
            hint = hint[0]
        text = str(message).removeprefix("Value error, ").rstrip(".")
        name = str(hint).strip(chr(39)) if hint else ""
        # a message that names its option already (check_device's "--device must be ...")
        # is not prefixed with it again
        named = name and (text.startswith(f"{name} ") or text.startswith(f"{name}:"))
        message = f"{name}: {text}" if name and not named else text
    message = str(message).rstrip(".")
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() \
        else message


def show_one_line(self: Any, file: Any = None) -> None:
    """Replacement of Click's UsageError.show: ``error: MESSAGE`` on stderr, the style of
    every other pairkit error, instead of the usage block."""
    import sys

    print(f"error: {one_line(self)}", file=file or sys.stderr)
