"""Atomic file output: write to a temp file beside the target, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pairkit.errors import PairkitError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path in the target's folder; rename it over ``target`` on success.

    On any exception the temp file is removed and ``target`` is left untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes 0600 files; outputs should be readable as any new file would be
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """Open a temp file for writing that replaces ``target`` when closed without error."""
    with atomic_path(target) as tmp:
        encoding = None if "b" in mode else "utf-8"
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def check_output(path: str | os.PathLike[str], force: bool, what: str = "output") -> Path:
    """Refuse to overwrite an existing file unless ``force``; return the path."""
    p = Path(path)
    if p.is_dir():
        raise PairkitError(f"{what} {p} is a folder, expected a file path")
    if p.exists() and not force:
        raise PairkitError(f"{what} {p} exists; pass --force to overwrite it")
    return p
