"""A store's files opened for reading, by the reader and the writers alike: regular files
only, a shard's ``.npy`` header checked against the manifest before it is memory-mapped
(and its size again before its rows are read: :func:`check_mapped`), the row count of an
item table."""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from pairkit.errors import StoreError

if TYPE_CHECKING:
    from pairkit.core.store import Shard


def open_regular(path: Path, what: str) -> IO[bytes]:
    """Open a store file for reading; StoreError when missing or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise StoreError(f"store {path.parent}: {what} {path.name} is missing") from None
    except OSError as exc:
        raise StoreError(f"store {path.parent}: {what} {path.name} is unreadable "
                         f"({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(f"store {path.parent}: {what} {path.name} is not a regular file")
    return os.fdopen(fd, "rb")


def map_shard(fh: IO[bytes], root: Path, shard: Shard, dim: int, dtype: str) -> np.ndarray:
    """Check a shard's .npy header against the manifest and memory-map its rows (read-only)."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dt = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dt = fmt.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy version {version}")
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise StoreError(f"store {root}: shard {shard.file} is unreadable ({first})") from None
    if str(dt) != dtype:
        raise StoreError(f"store {root}: shard {shard.file} is {dt}, manifest says {dtype}")
    if tuple(shape) != (shard.rows, dim):
        raise StoreError(f"store {root}: shard {shard.file} has shape {tuple(shape)}, "
                         f"manifest says ({shard.rows}, {dim})")
    offset = fh.tell()
    size = os.fstat(fh.fileno()).st_size
    if shard.bytes is not None and size != shard.bytes:
        raise StoreError(f"store {root}: shard {shard.file} is {size} bytes, manifest says "
                         f"{shard.bytes} (file changed or damaged)")
    expected = offset + shard.rows * dim * dt.itemsize
    if size != expected:
        raise StoreError(f"store {root}: shard {shard.file} is {size} bytes, its header says "
                         f"{expected} (truncated or padded)")
    if shard.rows == 0:
        return np.empty((0, dim), dtype=dt)
    return np.memmap(fh, dtype=dt, mode="r", shape=(shard.rows, dim), offset=offset,
                     order="F" if fortran else "C")


def check_mapped(array: np.ndarray, what: str) -> None:
    """StoreError when the file behind the memory-mapped shard ``array`` (from
    :func:`map_shard`; ``what``: ``store ROOT: shard FILE``) is now shorter than its rows
    need: it was truncated after it was opened, and reading the rows past its end would
    kill the process with SIGBUS. One fstat; nothing for an array held in memory. A file
    truncated between this check and the read still does (docs/formats.md)."""
    base = array.base if isinstance(array, np.memmap) else None
    if not isinstance(base, mmap.mmap):
        return
    try:
        size = base.size()
    except (OSError, ValueError):  # closed: nothing of it is read again
        return
    expected = int(array.offset) + array.nbytes
    if size < expected:
        raise StoreError(f"{what} is {size} bytes, its header says {expected} (truncated "
                         "while the store was open; open it again to check it)")


def parquet_rows(fh: IO[bytes], path: Path) -> int:
    """The rows of the Parquet file open as ``fh``; StoreError when it can't be read."""
    import pyarrow.parquet as pq

    try:
        fh.seek(0)
        return int(pq.ParquetFile(fh).metadata.num_rows)
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise StoreError(f"{path} is unreadable ({first})") from None
