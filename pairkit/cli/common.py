"""Shared CLI plumbing: stderr console and error handling.

Data goes to stdout; everything meant for a person goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import typer

from pairkit.core.terminate import stop_line
from pairkit.errors import PairkitError, allocation_failed, is_cuda_oom, out_of_memory_message

if TYPE_CHECKING:
    from rich.console import Console

_CONSOLE: Console | None = None


def console() -> Console:
    """The stderr console (rich), created on first use."""
    global _CONSOLE
    if _CONSOLE is None:
        from rich.console import Console

        class StderrConsole(Console):
            def on_broken_pipe(self) -> None:
                """The reader of stderr went away (``2>&1 | head -1``): the work goes on
                without its messages (rich's own exits 1 and points stdout at /dev/null)."""
                self.quiet = True
                to_devnull(2)

        # emoji=False: a path or a label holding ":fire:" is printed as written
        _CONSOLE = StderrConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)
    return _CONSOLE


def to_devnull(fd: int) -> None:
    """Point file descriptor ``fd`` (1 or 2) at /dev/null: its reader went away, and later
    writes and the final flush must not fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


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
    except MemoryError as exc:
        raise fail(out_of_memory_message(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (pairkit.core.terminate)
        raise fail(*stop_line(exc)) from None
    except BrokenPipeError:
        raise reader_gone() from None
    except OSError as exc:
        from pairkit.errors import os_error_message

        message = os_error_message(exc)
        raise (fail(message) if message else _internal(exc)) from None
    except Exception as exc:
        if is_cuda_oom(exc):
            raise fail("CUDA out of memory: try a smaller --batch-size") from None
        if allocation_failed(exc):  # torch's CPU allocator raises a RuntimeError
            raise fail(out_of_memory_message(exc)) from None
        raise _internal(exc) from None


def reader_gone() -> typer.Exit:
    """The reader of stdout went away (``| head -1``): not an error, as for other Unix
    tools. Stdout is pointed at /dev/null (the final flush would fail again) and the Exit
    to raise is code 0 (Click would turn the BrokenPipeError into exit 1)."""
    to_devnull(1)
    return typer.Exit(0)


def _internal(exc: Exception) -> typer.Exit:
    if os.environ.get("PAIRKIT_DEBUG"):
        raise exc
    first = str(exc).splitlines()[0] if str(exc) else ""
    return fail(
        f"internal error: {type(exc).__name__}: {first} "
        "(rerun with PAIRKIT_DEBUG=1 for the traceback and report it)"
    )



def one_line(exc: Any) -> str:
    """A Click usage error as pairkit's one line: ``--keep: 'x' is not one of ...``,
    ``no such option: --foo``, ``missing argument 'STORE'``."""
    from pairkit.cli.options import click_exceptions

    cx = click_exceptions()
    # a MissingParameter's text is its format_message(); its .message is empty
    plain = not isinstance(exc, cx.BadParameter) or isinstance(exc, cx.MissingParameter)
    message = str(exc.format_message() if plain else exc.message)
    if not plain:
        hint = exc.param_hint or (max(exc.param.opts, key=len) if exc.param is not None
                                  and getattr(exc.param, "opts", None) else None)
        if isinstance(hint, (list, tuple)):
            hint = hint[0]
        text = message.removeprefix("Value error, ").removesuffix(".")
        name = str(hint).strip(chr(39)) if hint else ""
        # a message that names its option already (check_device's "--device must be ...")
        # is not prefixed with it again
        named = name and (text.startswith(f"{name} ") or text.startswith(f"{name}:"))
        message = f"{name}: {text}" if name and not named else text
    message = message if message.endswith("..") else message.removesuffix(".")  # keep "..."
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() \
        else message


def show_one_line(self: Any, file: Any = None) -> None:
    """Replacement of Click's UsageError.show: ``error: MESSAGE`` on stderr, the style of
    every other pairkit error, instead of the usage block."""
    import sys

    with contextlib.suppress(BrokenPipeError):  # a closed stderr keeps the exit code 2
        print(f"error: {one_line(self)}", file=file or sys.stderr)
