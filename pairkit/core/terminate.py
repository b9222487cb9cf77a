"""SIGTERM as an exception: a command stopped by ``kill``, ``timeout`` or a cluster
scheduler cleans up as on Ctrl-C (an output's temp file, mine's parts folder, a folder
half swapped) and says so in one line, exit 143 (128 + 15, what a shell reports for a
process SIGTERM ended)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, NoReturn

TERMINATED_EXIT = 128 + int(signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM once :func:`raise_on_sigterm` ran. A
    KeyboardInterrupt, so every clean-up that runs on Ctrl-C (``except KeyboardInterrupt``,
    ``except BaseException``, ``finally``) runs on it too."""


def raise_on_sigterm() -> None:
    """From now on a SIGTERM to this process raises :class:`Terminated` in its main thread
    (the console script calls it first). A SIGTERM the parent had ignored stays ignored; a
    child forked later (a data loader's worker) that gets one ends as by default."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        return
    pid = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated

    signal.signal(signal.SIGTERM, handler)


def stop_line(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The message and exit code of a stop: ``terminated``, 143 on SIGTERM;
    ``interrupted``, 130 on Ctrl-C."""
    if isinstance(exc, Terminated):
        return "terminated", TERMINATED_EXIT
    return "interrupted", 130


def exit_stopped(exc: KeyboardInterrupt) -> NoReturn:
    """Write the stop's one line (:func:`stop_line`) on stderr and exit with its code: a
    stop outside a command's handler (while the command line loads or parses)."""
    message, code = stop_line(exc)
    sys.stderr.write(f"error: {message}\n")
    sys.exit(code)
