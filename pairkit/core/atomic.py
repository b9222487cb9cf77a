"""Atomic file output: write to a temp file beside the target, then rename.

A temp file is named ``.<target name>.<8 random chars>.tmp``; a writer killed mid-write
leaves one behind, and the next writer of that folder (holding its lock) removes it
(:func:`remove_stale_temps`). An output with no lock (a table, a stats file) has its own
temps removed by its next writer once a day old (:func:`remove_stale_output_temps`). A
write that fails because the disk is full says so in one line; the target is untouched,
so nothing already written is lost.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from pairkit.errors import PairkitError, UsageError

TEMP_RE = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")
# where a folder output replaced with --force puts the old one until it is removed
OLD_RE = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.old$")
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
LOW_SPACE_BYTES = 1 << 20


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_disk_full(exc: BaseException, folder: Path) -> bool:
    """True when ``exc`` (from any writer: numpy, pyarrow, torch, ...) means no space left.

    Some libraries lose errno (numpy: ``N requested and M written``; torch: ``unexpected
    pos``): then the free space of ``folder`` decides.
    """
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return True
    text = str(exc)
    if "No space left" in text or "Disk quota exceeded" in text:
        return True
    if isinstance(exc, OSError) and exc.errno is not None:
        return False  # a precise error that is not about space
    if isinstance(exc, (OSError, RuntimeError)):
        try:
            return shutil.disk_usage(folder).free < LOW_SPACE_BYTES
        except OSError:
            return False
    return False


def is_too_large(exc: BaseException) -> bool:
    """True when ``exc`` says a file went over a size limit (EFBIG: ``ulimit -f``, or the
    file system's largest file), also where a library kept only the text."""
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return True
    return "File too large" in str(exc)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (no-op where folders can't be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _commit_new(tmp_path: Path, target: Path) -> None:
    """Put ``tmp_path`` at ``target`` only if no file is there: a hard link fails when the
    name exists, so of two runs that both checked ``target`` was free, one gets an error
    instead of silently replacing the other's result."""
    try:
        os.link(tmp_path, target)
    except FileExistsError:
        raise PairkitError(f"output {target} was written by another run meanwhile; this "
                           "run's result was not written (pass --force to replace it)") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                             errno.EMLINK, errno.ENOSYS):
            raise
        if target.exists():  # a file system without hard links: check, then rename
            raise PairkitError(f"output {target} exists; pass --force to overwrite it") from None
        os.replace(tmp_path, target)
        return
    tmp_path.unlink()


def commit_files(tmp_dir: Path, names: list[str], folder: Path, replace: bool) -> None:
    """Move the files ``names`` of ``tmp_dir`` (a temp folder on ``folder``'s file system)
    into ``folder``, one rename each, so a set of outputs appears together (or not at all).

    ``replace=False``: a name taken meanwhile (another run) stops the commit with the
    "written by another run meanwhile" line, after removing the files this call had
    already put in place, so none of this run's files stay.
    """
    placed: list[Path] = []
    try:
        for name in names:
            target = folder / name
            if replace:
                os.replace(tmp_dir / name, target)
            else:
                _commit_new(tmp_dir / name, target)
            placed.append(target)
    except BaseException:
        if not replace:
            for target in placed:
                with contextlib.suppress(OSError):
                    target.unlink()
        raise
    fsync_dir(folder)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], replace: bool = True) -> Iterator[Path]:
    """Yield a temp path in the target's folder; rename it over ``target`` on success
    (``replace=False``: only if ``target`` still doesn't exist then, else PairkitError).

    On any exception the temp file is removed and ``target`` is left untouched; a full
    disk becomes ``disk full while writing TARGET: free space and rerun; nothing was
    lost``.
    """
    from pairkit.core.remote import check_local

    check_local(target, "output")
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise PairkitError(f"can't make the folder of {target}: a file is on the way "
                           f"({target.parent})") from None
    # named before it exists, and made inside the try: an interrupt at any point after
    # the name is taken (as the file is made, as its descriptor is closed) removes it
    with naming_target(target):
        tmp_path = temp_name(target)
    ours = True  # False when another writer took the name first: theirs to keep
    try:
        with naming_target(target):
            try:
                os.close(os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                ours = False
                raise
        yield tmp_path
        # the temp was made 0600; outputs should be readable as any new file would be
        os.chmod(tmp_path, 0o666 & ~_umask())
        if replace:
            os.replace(tmp_path, target)
        else:
            _commit_new(tmp_path, target)
    except BaseException as exc:
        # judged while the failed temp still holds its space (removing it first freed
        # what made the disk full, and a short write without errno looked like a bug)
        mine = isinstance(exc, Exception) and not isinstance(exc, PairkitError)
        full = mine and is_disk_full(exc, target.parent)
        if ours:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
        if full:
            raise PairkitError(f"disk full while writing {target}: free space and rerun; "
                               "nothing was lost") from exc
        if mine and is_too_large(exc):
            raise PairkitError(f"file too large while writing {target}: over the file "
                               "system's or the process's size limit (ulimit -f); nothing "
                               "was lost") from exc
        raise


@contextlib.contextmanager
def naming_target(target: Path) -> Iterator[None]:
    """An OSError inside names ``target``: making a temp file or folder beside an output
    fails on the output's folder, and the user's line should name the output they gave,
    not a temp name they never saw."""
    try:
        yield
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, str(target)) from None


_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def temp_name(target: Path, suffix: str = ".tmp") -> Path:
    """A name beside ``target`` that is free now (``.NAME.XXXXXXXX.tmp``, the names
    stale-temp cleaning knows), not made: a caller that makes it inside its own
    try/finally can't be interrupted between making it and being ready to remove it."""
    for _ in range(100):
        path = target.parent / f".{target.name}.{_token()}{suffix}"
        if not os.path.lexists(path):
            return path
    raise FileExistsError(errno.EEXIST, "no free temp name", str(target))


def _token() -> str:
    """8 random characters of ``[a-z0-9_]`` (as :mod:`tempfile`'s names)."""
    import secrets

    return "".join(secrets.choice(_TOKEN_CHARS) for _ in range(8))


@contextlib.contextmanager
def scratch_folder(target: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A new folder beside ``target`` (a :func:`temp_name`, made 0700) for an output
    written as a folder. Whatever is left of it when the body ends, by an error or not,
    is removed (a body that renamed it into place leaves nothing to remove). It is made
    inside the try that removes it: an interrupt at any point after its name is taken
    leaves no folder behind."""
    path: Path | None = None
    try:
        with naming_target(target):
            for _ in range(100):
                path = temp_name(target, suffix)
                try:
                    path.mkdir(mode=0o700)
                except FileExistsError:  # another writer took the name meanwhile
                    path = None
                    continue
                break
            else:
                raise FileExistsError(errno.EEXIST, "no free temp name", str(target))
        yield path
    finally:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def swap_folder(new: Path, place: Path) -> None:
    """Put the finished folder ``new`` (beside ``place``) in place of ``place``. A folder
    already there is renamed into a ``.NAME.XXXXXXXX.old`` folder first and removed
    after; when the swap fails or is interrupted between the two renames, it is put back,
    so ``place`` always holds the old folder or the new one."""
    if not os.path.lexists(place):
        os.replace(new, place)
        return
    with scratch_folder(place, ".old") as old:
        aside = old / place.name
        try:
            os.replace(place, aside)
            os.replace(new, place)
        except BaseException:
            if not os.path.lexists(place) and os.path.lexists(aside):
                os.replace(aside, place)
            raise


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike[str], mode: str = "w",
                replace: bool = True) -> Iterator[IO]:
    """Open a temp file for writing that replaces ``target`` when closed without error
    (``replace=False``: see :func:`atomic_path`)."""
    with atomic_path(target, replace=replace) as tmp:
        encoding = None if "b" in mode else "utf-8"
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def fsync_file(path: Path) -> None:
    """Flush a written file to disk (before the rename that commits it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(folder: str | os.PathLike[str],
                       is_ours: Callable[[str], bool]) -> list[str]:
    """Remove temp files of killed writers in ``folder`` whose target name ``is_ours``.

    Call only while holding the folder's writer lock (no live writer has temps then).
    Returns the removed names.
    """
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            m = TEMP_RE.match(entry.name)
            if m and is_ours(m.group("target")) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed


def check_output(path: str | os.PathLike[str], force: bool, what: str = "output") -> Path:
    """Refuse to overwrite an existing file unless ``force``; return the path. A URL is
    refused (this output is local only; tables take URLs: core/tables.py)."""
    from pairkit.core.remote import check_local, is_url

    if is_url(path):
        raise PairkitError(f"{what} {path}: object storage is not supported for this "
                           "output; give a local path")
    check_local(path, what)
    if str(path).endswith(("/", os.sep)):  # Path() would drop the slash and write a file
        raise UsageError(f"{what} {path} ends in /, a folder: expected a file path")
    p = Path(path)
    if p.is_dir():
        raise PairkitError(f"{what} {p} is a folder, expected a file path")
    if p.exists() and not force:
        raise PairkitError(f"{what} {p} exists; pass --force to overwrite it")
    remove_stale_output_temps(p)  # killed writers' temp files of this output
    return p


STALE_S = 86400.0  # a parts folder untouched this long was left by a killed driver


def remove_stale_parts(target: Path, now: float | None = None) -> list[str]:
    """Remove the parts folders (``.NAME.XXXXXXXX.tmp``) of ``target`` left by killed
    drivers: those not modified for :data:`STALE_S` (a live run adds a part every block).
    Returns the removed names. (:func:`remove_stale_output_temps`, folders only.)"""
    return remove_stale_output_temps(target, now, folders_only=True)


def remove_stale_output_temps(target: Path, now: float | None = None,
                              folders_only: bool = False) -> list[str]:
    """Remove the temps of ``target`` (``.NAME.XXXXXXXX.tmp`` beside it: files, or folders
    of a dataset's parts; ``folders_only``: the folders) that killed writers left: only
    those not modified for :data:`STALE_S` (a live writer's are younger), only this
    target's names. Also the folders an old output was renamed into when a folder output
    was replaced (``.NAME.XXXXXXXX.old``, left when the removal after the swap was
    killed), only while ``target`` itself is in place (else the old one is its only copy).
    For outputs written without a lock (tables, stats files, reports), at the start of
    their next write. Returns the removed names."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:  # no folder yet (nothing to sweep), or one this user can't list
        return removed
    replaced = os.path.lexists(target)
    for entry in entries:
        m = TEMP_RE.match(entry.name) or (OLD_RE.match(entry.name) if replaced else None)
        if not m or m.group("target") != target.name:
            continue
        try:
            folder = entry.is_dir(follow_symlinks=False)
            if (folders_only and not folder) or \
                    now - entry.stat(follow_symlinks=False).st_mtime < STALE_S:
                continue
            if folder:
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.name)
    return removed
