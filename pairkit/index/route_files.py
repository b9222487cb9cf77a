"""Where the partitioned range search's route blocks keep their routes until the
partitions' searches read them (:mod:`pairkit.index.partitioned_range`, step 3).

A route block puts its routes, sorted by cluster, as one array of :data:`ROUTE` records
(the routed row and that row's own cluster: 12 bytes a route); a cluster's search reads
its slice of each block's array (the offsets come from the counted plan), nothing else:

- :class:`RoutesHere`: in this process's memory (the local search: the blocks and the
  searches run here, :func:`~pairkit.core.blocks_here.map_here`);
- :class:`RouteFiles`: one file (or object) per block in a scratch folder, a local path
  or a URL of object storage (:mod:`pairkit.core.remote`): what ``dedup --ray``'s
  workers write and read (ranged reads), so that the driver never holds the routes.
  :func:`scratch_routes` makes the folder under a location every worker sees (beside
  the run's output: :func:`scratch_beside`); :meth:`RouteFiles.remove` removes it, on
  success and on failure alike.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# a route: the row routed to a cluster, and the row's own cluster (its membership)
ROUTE = np.dtype([("row", "<i8"), ("own", "<i4")])
SCRATCH_PREFIX = ".dedup-routes."  # the scratch folder: .dedup-routes.XXXXXXXX.tmp


def no_routes() -> np.ndarray:
    return np.zeros(0, ROUTE)


@dataclass
class RoutesHere:
    """The route blocks' records in this process (the search runs here too)."""

    blocks: dict[int, np.ndarray] = field(default_factory=dict)

    def put(self, block: int, records: np.ndarray) -> None:
        self.blocks[block] = records

    def read(self, blocks: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Records ``starts[i] .. starts[i] + counts[i] - 1`` of block ``blocks[i]``, for
        each ``i``, concatenated in that order."""
        parts = [self.blocks[int(b)][int(s):int(s) + int(c)]
                 for b, s, c in zip(blocks, starts, counts, strict=True)]
        return np.concatenate(parts) if parts else no_routes()

    def remove(self) -> None:
        self.blocks.clear()


@dataclass(frozen=True)
class RouteFiles:
    """The route blocks' records as files ``routes-NNNNN.bin`` (raw :data:`ROUTE`
    records) in ``folder``: a local path or a URL, seen by every process that writes or
    reads them."""

    folder: str

    def name(self, block: int) -> str:
        from pairkit.core.remote import join

        return join(self.folder, f"routes-{block:05d}.bin")

    def put(self, block: int, records: np.ndarray) -> None:
        """Write block ``block``'s records, whole (an object put whole, a file renamed
        into place)."""
        from pairkit.core.remote import write_whole

        write_whole(self.name(block), memoryview(np.ascontiguousarray(records, ROUTE)))

    def read(self, blocks: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """See :meth:`RoutesHere.read`: ranged reads of the blocks' files."""
        from pairkit.core.remote import is_url, read_spans

        size = ROUTE.itemsize
        names = [self.name(int(b)) for b in blocks]
        begin = [int(s) * size for s in starts]
        end = [(int(s) + int(c)) * size for s, c in zip(starts, counts, strict=True)]
        if is_url(self.folder):
            chunks = read_spans(names, begin, end)
        else:
            chunks = []
            for name, b0, b1 in zip(names, begin, end, strict=True):
                with open(name, "rb") as fh:
                    fh.seek(b0)
                    chunks.append(fh.read(b1 - b0))
        for chunk, b0, b1, name in zip(chunks, begin, end, names, strict=True):
            if len(chunk) != b1 - b0:
                from pairkit.errors import PairkitError

                raise PairkitError(f"route file {name} is shorter than its counted routes")
        return np.frombuffer(b"".join(chunks), ROUTE) if chunks else no_routes()

    def remove(self) -> None:
        """Remove the folder and every file in it (best effort: what can't be removed
        stays, nothing is raised)."""
        import shutil

        from pairkit.core.remote import is_url, join, list_names, remove
        from pairkit.errors import PairkitError

        if not is_url(self.folder):
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        with contextlib.suppress(PairkitError):
            for name in list_names(self.folder):
                with contextlib.suppress(PairkitError):
                    remove(join(self.folder, name))


def scratch_routes(where: str | Path | None) -> RouteFiles:
    """A new, empty scratch folder for the route files under ``where`` (a local folder
    or a URL; None: the system's temp folder), named ``.dedup-routes.XXXXXXXX.tmp``.
    Locally, such folders of killed runs untouched for a day are removed first."""
    import tempfile

    from pairkit.core.remote import is_url, join

    if where is not None and is_url(str(where)):
        return RouteFiles(join(str(where), f"{SCRATCH_PREFIX}{secrets.token_hex(4)}.tmp"))
    parent = Path(where) if where is not None else Path(tempfile.gettempdir())
    if where is not None:
        from pairkit.core.atomic import remove_stale_parts

        with contextlib.suppress(OSError):
            remove_stale_parts(parent / SCRATCH_PREFIX.strip("."))
    try:
        # the output's folder, which the run makes for its output anyway
        parent.mkdir(parents=True, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, suffix=".tmp", dir=parent)
    except OSError as exc:
        from pairkit.errors import PairkitError

        raise PairkitError(f"the partitions' routes go into a scratch folder under {parent}, "
                           f"which could not be made: {exc.strerror or exc}") from None
    return RouteFiles(str(Path(folder).resolve()))


def scratch_beside(output: str) -> str | None:
    """Where ``dedup --ray`` keeps its route files for an output at ``output``: the
    output's folder (a local path) or prefix (a URL), which the run writes anyway; None
    (the system's temp folder: one machine's) for standard output. Never under the
    store, which is the run's input."""
    from pairkit.core.remote import is_url

    if output in ("", "-"):
        return None
    if is_url(output):
        head, _, _ = output.rstrip("/").rpartition("/")
        return head if "://" in head and not head.endswith(":/") else output.rstrip("/")
    return str(Path(output).resolve().parent)
