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
left out (empty) and, with ``force``, the parts of the table it replaced.
:meth:`RemoteParts.abort` removes every object with the token: a failed run leaves
nothing behind, and a reader never takes an uncommitted part (it reads exactly the parts
the parts file names: :mod:`pairkit.core.remote_tables`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
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
