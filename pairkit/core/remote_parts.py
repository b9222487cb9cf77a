"""A dataset table on object storage written part by part, by any number of processes,
and committed once: what ``-o s3://bucket/pairs/`` is made of (docs/formats.md).

:func:`start_parts` is the writer's start (its random token, and the version of the
``_pairkit_parts.json`` it found: the commit's condition). Each part is put whole under
a name that carries the token (:meth:`RemoteParts.part_name`,
``part-00007-1a2b3c4d.parquet``), by whichever process made it (a Ray worker:
:mod:`pairkit.mine.block_parts`), and its record (rows, bytes, sha256) goes back to the
committer. :meth:`RemoteParts.commit` writes the parts file naming them, in order,
conditionally (``If-Match`` the version found at the start, ``If-None-Match: *`` when
there was none), so of two writers only the first commits; then it removes the parts it
left out (empty), with ``force`` the parts of the table it replaced, and the objects of
writers that never committed (:meth:`RemoteParts.sweep`).
:meth:`RemoteParts.abort` removes every object with the token: a failed run leaves
nothing behind, and a reader never takes an uncommitted part (it reads exactly the parts
the parts file names: :mod:`pairkit.core.remote_tables`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from pairkit.core.remote import (
    CommitConflict,
    join,
    list_names,
    put,
    put_if,
    read_tagged,
    remove,
    scheme,
)
from pairkit.errors import PairkitError

PARTS = "_pairkit_parts.json"
MAX_PARTS_BYTES = 64 << 20
STALE_SECONDS = 24 * 3600  # where no commit is conditional: a writer's objects this old
# the objects a writer puts under the prefix, each with its token: its parts, and the side
# files of mine's blocks (pairkit.core.side_files.side_path: .pos-000001-1a2b3c4d.keys)
TOKEN_NAME_RE = re.compile(r"^(part-\d{5,}-[0-9a-f]{8}\.parquet"
                           r"|\.[a-z]+(-\d+)+-[0-9a-f]{8}\.(keys|npz))$")


def uncommitted_only(names: dict[str, dict[str, Any]]) -> bool:
    """True when the objects ``names`` (a prefix's listing) are only writers' token objects
    and no parts file: what a killed writer leaves, which is no table."""
    return PARTS not in names and all(TOKEN_NAME_RE.match(n) for n in names)


def stamp(info: dict[str, Any]) -> float | None:
    """The object's LastModified (a listing's entry) in seconds, or None."""
    modified = info.get("LastModified") or info.get("mtime")
    return modified.timestamp() if hasattr(modified, "timestamp") else None


@dataclass(frozen=True)
class RemoteParts:
    """One writer's parts of the dataset at ``url`` (no trailing ``/``)."""

    url: str
    token: str
    old_tag: str | None = None  # the parts file's version at the start (None: none)
    old_parts: frozenset[str] = field(default_factory=frozenset)

    def part_name(self, number: int) -> str:
        return f"part-{number:05d}-{self.token}.parquet"

    def put_part(self, number: int, data: bytes, rows: int) -> dict[str, Any]:
        """Put part ``number`` (``data``: its parquet bytes, ``rows`` rows) and return
        its record for :meth:`commit`."""
        name = self.part_name(number)
        put(join(self.url, name), data)
        return {"file": name, "rows": int(rows), "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}

    def commit(self, records: list[dict[str, Any]], force: bool) -> None:
        """Name the parts ``records`` (:meth:`put_part`'s, in table order) in the parts
        file, conditionally; parts of no rows are left out (one kept when all are empty)
        and removed. PairkitError, and this writer's objects removed, when another writer
        committed first."""
        keep = [r for r in records if r["rows"] > 0] or records[:1]
        doc = json.dumps({"format": "pairkit-parts", "parts": keep}, indent=1).encode()
        try:
            if scheme(self.url) in ("s3", "s3a"):
                put_if(join(self.url, PARTS), doc, self.old_tag)
            else:
                put(join(self.url, PARTS), doc)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, CommitConflict):
                raise PairkitError(f"output {self.url}/ was written meanwhile by another "
                                   "process: nothing of this run was committed") from None
            raise
        kept = {r["file"] for r in keep}
        gone = {r["file"] for r in records} - kept
        if force:
            gone |= self.old_parts - kept
        for name in sorted(gone):
            with contextlib.suppress(PairkitError):
                remove(join(self.url, name))
        with contextlib.suppress(PairkitError):
            self.sweep(kept)

    def sweep(self, kept: set[str]) -> None:
        """After the commit: remove the token objects of other writers that the parts file
        does not name (a killed run's, a replaced table's left by a run killed while it
        removed them). On s3:// those older than this writer's first object: such a writer
        started before this commit, so its own conditional commit can't succeed; elsewhere
        (no conditional commit) those a day old."""
        names = list_names(self.url)
        ours = [t for n, i in names.items() if self.token in n and (t := stamp(i)) is not None]
        if scheme(self.url) in ("s3", "s3a"):
            if not ours:
                return
            cutoff = min(ours)
        else:
            cutoff = time.time() - STALE_SECONDS
        for name, info in names.items():
            t = stamp(info)
            if TOKEN_NAME_RE.match(name) and self.token not in name and name not in kept \
                    and t is not None and t < cutoff:
                with contextlib.suppress(PairkitError):
                    remove(join(self.url, name))

    def abort(self) -> None:
        """Remove every object this writer put (best effort)."""
        with contextlib.suppress(PairkitError):
            for name in list_names(self.url):
                if self.token in name:
                    with contextlib.suppress(PairkitError):
                        remove(join(self.url, name))


def start_parts(url: str) -> RemoteParts:
    """A new writer of the dataset at ``url``: its token and the parts file it found."""
    url = url.rstrip("/")
    old_tag, old_parts = None, frozenset()
    try:
        raw, old_tag = read_tagged(join(url, PARTS), MAX_PARTS_BYTES)
        old_parts = frozenset(p["file"] for p in json.loads(raw)["parts"])
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError):
        old_parts = frozenset()
    return RemoteParts(url, secrets.token_hex(4), old_tag, old_parts)
