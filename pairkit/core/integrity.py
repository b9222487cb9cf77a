"""Checksums and bounded reads: what pairkit reads back is what it wrote.

- :func:`sha256_file` / :func:`sha256_fd`: hex sha256 of a file (by path or open file).
- :func:`shard_sums`: a shard's size, sha256 and block checksums (the sha256 of each
  piece of a fixed size, which a ranged read of a few rows can check), in one pass.
- :func:`seal` / :func:`check_seal`: a JSON document that carries the sha256 of its own
  canonical form, so a flipped bit anywhere in it is refused, not believed.
- :func:`read_regular_file`: the bytes of a regular file of bounded size (a FIFO, a
  device or an oversize file is refused before anything is read).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pairkit.errors import PairkitError

SEAL_KEY = "self_sha256"


def sha256_fd(fh: IO[bytes], chunk: int = 1 << 22) -> str:
    """Hex sha256 of an open binary file, read from its start (position restored to 0)."""
    h = hashlib.sha256()
    fh.seek(0)
    while block := fh.read(chunk):
        h.update(block)
    fh.seek(0)
    return h.hexdigest()


def shard_sums(fh: IO[bytes], block: int) -> dict[str, Any]:
    """A shard's manifest sums (docs/formats.md) of an open binary file, read once from its
    start (position restored to 0): ``{"bytes": its size, "sha256": hex sha256 of the
    whole, "blocks": {"bytes": block, "sha256_base64": ...}}``, the block checksums being
    the sha256 of each ``block`` bytes in order (the last piece shorter), their 32-byte
    digests one after the other, in base64 (43 characters a block, not 64 in hex): what a
    ranged read checks."""
    whole = hashlib.sha256()
    blocks = []
    size = 0
    fh.seek(0)
    while piece := fh.read(block):
        whole.update(piece)
        blocks.append(hashlib.sha256(piece).digest())
        size += len(piece)
    fh.seek(0)
    return {"bytes": size, "sha256": whole.hexdigest(),
            "blocks": {"bytes": block,
                       "sha256_base64": base64.b64encode(b"".join(blocks)).decode("ascii")}}


def block_digests(text: Any) -> bytes | None:
    """The digests (32 bytes each) of a shard's block checksums (:func:`shard_sums`),
    None when ``text`` is not base64."""
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as fh:
        return sha256_fd(fh, chunk)


def canonical_json(doc: dict[str, Any]) -> bytes:
    """The bytes a seal is computed over: sorted keys, no spaces, ASCII only.

    In Python: ``json.dumps(doc, sort_keys=True, separators=(",", ":"),
    ensure_ascii=True).encode()`` with the seal key removed.
    """
    body = {k: v for k, v in doc.items() if k != SEAL_KEY}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def seal(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``self_sha256`` set to the sha256 of its canonical form."""
    out = {k: v for k, v in doc.items() if k != SEAL_KEY}
    out[SEAL_KEY] = hashlib.sha256(canonical_json(out)).hexdigest()
    return out


def seal_ok(doc: dict[str, Any]) -> bool:
    """True when ``doc`` carries a seal that matches its content."""
    value = doc.get(SEAL_KEY)
    return isinstance(value, str) and value == hashlib.sha256(canonical_json(doc)).hexdigest()


def dump_sealed(doc: dict[str, Any], fh: IO[str]) -> dict[str, Any]:
    """Write ``doc`` sealed as indented JSON (ASCII, so any file name survives); return it."""
    sealed = seal(doc)
    json.dump(sealed, fh, indent=2, ensure_ascii=True, allow_nan=False)
    fh.write("\n")
    return sealed


def read_checked(path: str | os.PathLike[str], max_bytes: int,
                 check: Callable[[os.stat_result], None]) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path``, opened non-blocking; ``check`` sees the
    open descriptor's stat first and raises to refuse (so a FIFO or a device, or a symlink
    to one, is refused without blocking or reading). More than ``max_bytes`` bytes back
    means the file grew while read: the caller says so in its own words. OSError (a
    missing file ...) passes through."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        check(os.fstat(fd))
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            return fh.read(max_bytes + 1)
    finally:
        if fd >= 0:
            os.close(fd)


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``.

    Opened non-blocking and checked on the open descriptor (:func:`read_checked`). Raises
    PairkitError naming ``what``; FileNotFoundError passes through for callers that
    handle absence.
    """
    p = Path(path)

    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise PairkitError(f"{what} {p} is not a regular file")
        if st.st_size > max_bytes:
            raise PairkitError(f"{what} {p} is {st.st_size:,} bytes, more than the "
                               f"{max_bytes:,} allowed")

    data = read_checked(p, max_bytes, check)
    if len(data) > max_bytes:
        raise PairkitError(f"{what} {p} grew past {max_bytes:,} bytes while read")
    return data


def read_json_file(path: str | os.PathLike[str], max_bytes: int, what: str) -> Any:
    """Parse a bounded regular JSON file; one-line PairkitError when it is not readable JSON."""
    data = read_regular_file(path, max_bytes, what)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise PairkitError(f"{what} {path} is nested too deeply to be pairkit's") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise PairkitError(f"{what} {path} is not valid JSON ({exc})") from None
