"""One writer at a time per output folder (a store or a head).

Every command that writes into a store or a head folder holds an exclusive
``fcntl.flock`` on ``FOLDER/.pairkit.lock`` for its whole run. The lock file holds
the holder's pid, host, start time and command line, so a second writer stops at once
with one line naming the holder (exit code 1) instead of interleaving its files.

The kernel drops the lock when the holder dies (even by ``kill -9``), so a stale lock
file never blocks anyone. The holder removes the file when it is done (after checking
that the path still names the file it locked, so a waiter that raced with the
removal retries on the new file). Readers take no lock: they read the last committed
manifest (see store.py).

Within a process the lock is re-entrant for the thread that holds it only: another
thread of the same process is refused like another process (two threads writing one
store would interleave their files just the same).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from pairkit.errors import PairkitError

LOCK_NAME = ".pairkit.lock"
_HELD: dict[str, WriterLock] = {}  # folders this process holds, by real path
_HELD_GUARD = threading.Lock()  # guards _HELD and every WriterLock.depth


class LockHeld(PairkitError):
    """Another process is writing the folder."""


def _command() -> str:
    argv = list(sys.argv)
    if argv and (argv[0].endswith(("__main__.py", "/pairkit")) or argv[0] == "pairkit"):
        argv[0] = "pairkit"
    text = " ".join(argv)
    return text if len(text) <= 200 else text[:197] + "..."


def _holder_text(raw: bytes) -> str:
    try:
        info = json.loads(raw.decode("utf-8", "replace"))
        return (f"pid {info['pid']} on {info['host']} since {info['since']} "
                f"({info['command']})")
    except (ValueError, KeyError, TypeError):
        return "another pairkit process"


class WriterLock:
    """An exclusive lock on one folder; re-entrant within the thread that took it (see
    :func:`writer_lock`)."""

    def __init__(self, folder: Path, fd: int, created: bool) -> None:
        self.folder = folder
        self.fd = fd
        self.created = created  # the folder did not exist before the lock was taken
        self.depth = 1
        self.thread = threading.get_ident()  # the thread that holds it

    @property
    def path(self) -> Path:
        return self.folder / LOCK_NAME

    @classmethod
    def acquire(cls, folder: Path, what: str) -> WriterLock:
        import fcntl

        def refuse_a_file() -> None:
            if folder.exists() and not folder.is_dir():
                raise PairkitError(f"output {folder} is an existing file, expected a "
                                   "folder") from None

        created = not folder.exists()
        refuse_a_file()
        path = folder / LOCK_NAME
        for _ in range(20):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except (FileNotFoundError, FileExistsError):
                # a holder that created the folder removed it as we opened it; or as we
                # made it (mkdir found it there, then it was gone: "File exists")
                refuse_a_file()
                continue
            except OSError as exc:
                raise PairkitError(f"can't write in {what} {folder} ({exc.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raw = os.pread(fd, 4096, 0)
                for _wait in range(20):  # the holder writes its name just after locking
                    if _holder_text(raw) != "another pairkit process":
                        break
                    time.sleep(0.01)
                    raw = os.pread(fd, 4096, 0)
                os.close(fd)
                raise LockHeld(
                    f"{what} {folder} is being written by {_holder_text(raw)}: wait for it to "
                    "finish (pairkit allows one writer at a time)") from None
            mine = os.fstat(fd)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
                os.close(fd)  # the previous holder removed this file as we opened it
                continue
            info = {"pid": os.getpid(), "host": socket.gethostname(),
                    "since": _dt.datetime.now().isoformat(timespec="seconds"),
                    "command": _command()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode("utf-8", "backslashreplace"), 0)
            return cls(folder, fd, created)
        raise PairkitError(f"could not lock {path}: it keeps being replaced")  # pragma: no cover

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)
        if self.created:
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only succeeds when the run left nothing behind


def is_held(folder: str | os.PathLike[str]) -> bool:
    """True when this thread holds the writer lock of ``folder``."""
    with _HELD_GUARD:
        lock = _HELD.get(os.path.realpath(folder))
        return lock is not None and lock.thread == threading.get_ident()


def writer_holder(folder: str | os.PathLike[str]) -> str | None:
    """Who is writing ``folder`` now ("pid N on HOST since T (COMMAND)"), read from its
    lock file, when another process (or another thread of this one) holds its writer
    lock; None when nobody does (no lock file, or one a killed writer left) or this thread
    does. Probes with a shared, non-blocking flock released at once."""
    import fcntl

    if is_held(folder):
        return None
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_text(os.pread(fd, 4096, 0))
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def writer_lock(folder: str | os.PathLike[str], what: str = "folder") -> Iterator[WriterLock]:
    """Hold the exclusive writer lock of ``folder`` (created if missing) for the block.

    Raises :class:`LockHeld` (one line naming pid, host and command of the holder)
    when another process, or another thread of this process, holds it. Re-entrant
    within the thread that holds it. A folder created here
    and left empty is removed again on exit. A URL (object storage) takes no lock: its
    commit is a conditional write instead (core/remote_store.py); this yields None.
    """
    from pairkit.core.remote import is_url, location

    if is_url(folder):
        yield None  # type: ignore[misc]
        return
    folder = Path(location(folder))
    key = os.path.realpath(folder)
    me = threading.get_ident()
    with _HELD_GUARD:
        lock = _HELD.get(key)
        if lock is not None and lock.thread == me:
            lock.depth += 1
        elif lock is not None:
            raw = os.pread(lock.fd, 4096, 0)
            raise LockHeld(
                f"{what} {folder} is being written by {_holder_text(raw)} in another thread: "
                "wait for it to finish (pairkit allows one writer at a time)")
    if lock is None:
        # another thread that gets here too is refused by the flock (a second open file)
        lock = WriterLock.acquire(folder, what)
        with _HELD_GUARD:
            _HELD[key] = lock
    try:
        yield lock
    finally:
        with _HELD_GUARD:
            lock.depth -= 1
            done = lock.depth == 0
            if done:
                _HELD.pop(key, None)
        if done:
            lock.release()
