"""One shard of a store on object storage read by byte ranges: :class:`RangedShard`.

Reading rows ``ids`` of a shard fetches its ``.npy`` header once (where the data starts,
its dtype and shape, checked against the manifest) and then only the byte ranges that
hold those rows, never the whole object:

- **a shard with block checksums** (``blocks`` in its manifest record: the sha256 of
  each :data:`~pairkit.core.manifest.SHARD_BLOCK_BYTES` bytes of the file, written by
  every writer since they were added; docs/formats.md): the blocks that hold the rows
  are fetched, adjacent ones in one ranged GET, and each block is checked against its
  checksum before a row of it is used. A read costs whole blocks (1 MiB by default)
  around its rows, and checks every byte it uses.
- **an older shard** (no ``blocks``): its sha256 is checked once per
  :class:`RangedShard` (once per process that opened the store) by streaming the object
  in pieces of :data:`STREAM_BYTES` without keeping it: the cost of its bytes, not of
  its memory; then the rows' own byte ranges are fetched, rows less than
  :data:`GAP_BYTES` apart in one range.

Either way the ranges of one read are fetched :data:`BATCH_BYTES` at a time (concurrent
ranged GETs, :func:`pairkit.core.remote.read_ranges`), each batch's rows copied out
before the next is fetched, so a read holds its rows and at most one batch. A damaged
byte, a short object or a header that does not match the manifest is refused in one line
(StoreError).
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np

from pairkit.core.integrity import block_digests
from pairkit.errors import PairkitError, StoreError

GAP_BYTES = 1 << 18  # pieces at most this far apart are fetched as one range
BATCH_BYTES = 64 << 20  # the ranges fetched at once (and a range's most bytes)
STREAM_BYTES = 8 << 20  # an older shard's sha256: streamed in pieces of this size
HEAD_BYTES = 128  # the .npy header, read first (numpy writes 128 bytes for a shard)
MAX_HEAD_BYTES = 1 << 20  # a longer header is not a pairkit shard's


class RangedShard:
    """Rows of the shard ``rec`` (its manifest record) of the store at ``url``, as an
    array-like of shape ``(rows, dim)`` in the stored ``dtype``: ``len``, ``shard[key]``
    (an int, a slice or a 1-d int array: a new array of just those rows, read by ranges)
    and ``np.asarray(shard)`` (every row, read the same way)."""

    ndim = 2

    def __init__(self, url: str, rec: dict[str, Any], dim: int, dtype: str) -> None:
        self.url, self.rec, self.file = url, rec, str(rec["file"])
        self.dtype = np.dtype(dtype)
        self.shape = (int(rec["rows"]), int(dim))
        self.bytes = int(rec["bytes"])
        blocks = rec.get("blocks")
        self.block = int(blocks["bytes"]) if blocks else 0
        # the blocks' sha256 digests, 32 bytes each (checked by the manifest's parser)
        self.digests = block_digests(blocks["sha256_base64"]) if blocks else None
        self.offset: int | None = None  # where the rows start, from the header
        self.verified = False  # an older shard's whole sha256 checked here

    def __len__(self) -> int:
        return self.shape[0]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "verified": False}  # checked again where it is read

    def fail(self, why: str) -> StoreError:
        return StoreError(f"store {self.url}: shard {self.file} {why}; the store may have "
                          "been rewritten while it was being read: rerun the command")

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, (int, np.integer)):
            return self.take(np.array([key]))[0]
        if isinstance(key, slice):
            return self.take(np.arange(*key.indices(len(self)), dtype=np.int64))
        key = np.asarray(key)
        if key.ndim != 1 or (key.size and key.dtype.kind not in "iu"):
            raise IndexError("a shard takes an int, a slice or a 1-d array of ints")
        return self.take(key)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        rows = self.take(np.arange(len(self), dtype=np.int64))
        return rows if dtype is None else rows.astype(dtype)

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` (ints; negative from the end) as a new (len(ids), dim) array."""
        ids = np.asarray(ids).astype(np.int64, copy=False)
        n, d = self.shape
        if ids.size and (int(ids.min()) < -n or int(ids.max()) >= n):
            raise IndexError(f"row id out of range for {n} rows")
        ids = np.where(ids < 0, ids + n, ids)
        out = np.empty((len(ids), d), dtype=self.dtype)
        if not len(ids):
            return out
        start = self.start()
        row = d * self.dtype.itemsize
        order = np.argsort(ids, kind="stable")
        firsts = start + ids[order] * row  # each row's first byte, ascending
        r0, r1, used = self.ranges(firsts, firsts + row, start, row)
        which = np.searchsorted(r0, firsts, side="right") - 1  # the range holding each row
        for a, b in batches(r1 - r0):
            pieces = self.fetch(r0[a:b], r1[a:b], used)
            lo_rows = np.searchsorted(which, np.arange(a, b), side="left")
            hi_rows = np.searchsorted(which, np.arange(a, b), side="right")
            for j, piece in enumerate(pieces):
                sel = order[lo_rows[j]:hi_rows[j]]
                if not len(sel):
                    continue
                first = max(0, -(-(int(r0[a + j]) - start) // row))  # first row in it
                skip = start + first * row - int(r0[a + j])
                whole = (len(piece) - skip) // row
                rows = np.frombuffer(piece, self.dtype, count=whole * d,
                                     offset=skip).reshape(whole, d)
                out[sel] = rows[ids[sel] - first]
        return out

    def ranges(self, firsts: np.ndarray, ends: np.ndarray, start: int, row: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The byte ranges ``[r0, r1)`` (ascending) to fetch for the byte spans ``firsts
        .. ends`` (ascending), each span inside the range where it starts: whole checksum
        blocks, or the rows themselves (an older shard, checked whole first); and the
        units the spans touch (the blocks to check)."""
        if self.digests is not None:
            base, unit = 0, self.block
        else:
            self.check_whole()
            base, unit = start, row
        lo = (firsts - base) // unit
        hi = (ends - 1 - base) // unit
        units = covered(lo, hi)
        run0, run1 = runs(units, max(0, GAP_BYTES // unit), max(1, BATCH_BYTES // unit))
        r0 = base + run0 * unit
        r1 = np.minimum(base + (run1 + 1) * unit, self.bytes)
        # a row across the cut of a long run: its range reaches to the row's last block
        which = np.searchsorted(r0, firsts, side="right") - 1  # ascending, as firsts
        last = np.searchsorted(which, np.arange(len(r0)), side="right") - 1
        need = ends[np.maximum(last, 0)]  # the end of the last row starting in each
        r1 = np.maximum(r1, np.minimum(base - (base - need) // unit * unit, self.bytes))
        return r0, r1, units

    def fetch(self, r0: np.ndarray, r1: np.ndarray, used: np.ndarray | None = None
              ) -> list[bytes]:
        """The ranges' bytes, each checked: its length, and with block checksums each
        block in it that is ``used`` (block numbers, sorted; None: all), the blocks
        fetched only to join two ranges into one being of no use (a range of a shard with
        blocks starts and ends at block bounds)."""
        from pairkit.core.remote import join, read_ranges

        try:
            pieces = read_ranges(join(self.url, self.file), r0.tolist(), r1.tolist())
        except FileNotFoundError:
            raise self.fail("is missing") from None
        except PairkitError as exc:
            raise self.fail(f"is unreadable ({exc})") from None
        for lo, hi, piece in zip(r0.tolist(), r1.tolist(), pieces, strict=True):
            if len(piece) != hi - lo:
                raise self.fail(f"is shorter than the {self.bytes} bytes the manifest says "
                                "(object changed or damaged)")
            if self.digests is not None:
                view = memoryview(piece)
                for k in range(0, len(piece), self.block):
                    number = (lo + k) // self.block
                    if used is not None and not has(used, number):
                        continue
                    if hashlib.sha256(view[k:k + self.block]).digest() != \
                            self.digests[32 * number:32 * number + 32]:
                        raise self.fail(f"checksum mismatch in bytes {lo + k}.."
                                        f"{min(lo + k + self.block, self.bytes) - 1} "
                                        "(object changed or damaged)")
        return pieces

    def check_whole(self) -> None:
        """An older shard (no block checksums): its size and sha256 checked once, the
        object streamed in pieces and none kept."""
        if self.verified:
            return
        h = hashlib.sha256()
        done = 0
        while done < self.bytes:
            end = min(self.bytes, done + STREAM_BYTES)
            piece = self.fetch(np.array([done]), np.array([end]))[0]
            h.update(piece)
            done = end
        if h.hexdigest() != self.rec["sha256"]:
            raise self.fail("checksum mismatch (object changed or damaged)")
        self.verified = True

    def head(self, end: int) -> bytes:
        """The object's first ``end`` bytes (checked: the blocks that hold them)."""
        if self.digests is None:
            return self.fetch(np.array([0]), np.array([end]))[0]
        last = (end - 1) // self.block
        r1 = min(self.bytes, (last + 1) * self.block)
        return self.fetch(np.array([0]), np.array([r1]), np.arange(last + 1))[0][:end]

    def start(self) -> int:
        """Where the rows start in the object: its header read (once) and checked
        against the manifest."""
        if self.offset is not None:
            return self.offset
        if self.digests is None:
            self.check_whole()
        head = self.head(min(self.bytes, HEAD_BYTES))
        if len(head) >= 12 and head[:6] == b"\x93NUMPY":  # the header's own length
            v1 = head[6] == 1
            end = (10 if v1 else 12) + int.from_bytes(head[8:10] if v1 else head[8:12],
                                                      "little")
            if end > len(head) and end <= min(self.bytes, MAX_HEAD_BYTES):
                head = self.head(end)
        try:
            shape, fortran, dt, offset = npy_header(head)
        except ValueError as exc:
            raise self.fail(f"is unreadable ({exc})") from None
        want = (self.shape[0], self.shape[1])
        if str(dt) != str(self.dtype) or tuple(shape) != want or fortran:
            raise self.fail(f"is {dt} {tuple(shape)}, manifest says {self.dtype} {want}")
        if self.bytes != offset + want[0] * want[1] * dt.itemsize:
            raise self.fail(f"is {self.bytes} bytes in the manifest, its header says "
                            f"{offset + want[0] * want[1] * dt.itemsize}")
        self.offset = offset
        return offset


def has(sorted_values: np.ndarray, value: int) -> bool:
    """Whether ``value`` is in the sorted array."""
    at = int(np.searchsorted(sorted_values, value))
    return at < len(sorted_values) and int(sorted_values[at]) == value


def covered(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The units ``lo[i] .. hi[i]`` (inclusive) of all ``i``, sorted and unique."""
    count = hi - lo + 1
    if int(count.max()) == 1:
        return np.unique(lo)
    starts = np.repeat(lo - np.cumsum(count) + count, count)
    return np.unique(starts + np.arange(int(count.sum())))


def runs(units: np.ndarray, gap: int, longest: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``units`` as runs ``[run0, run1]`` (inclusive): units at most ``gap``
    missing units apart joined, no run longer than ``longest`` units."""
    breaks = np.flatnonzero(np.diff(units) > gap + 1) + 1
    run0 = units[np.r_[0, breaks]]
    run1 = units[np.r_[breaks - 1, len(units) - 1]]
    if int((run1 - run0).max()) >= longest:  # cut long runs
        pieces = [np.arange(a, b + 1, longest) for a, b in zip(run0.tolist(), run1.tolist(),
                                                               strict=True)]
        cut0 = np.concatenate(pieces)
        cut1 = np.minimum(cut0 + longest - 1, np.repeat(run1, [len(p) for p in pieces]))
        return cut0, cut1
    return run0, run1


def batches(sizes: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive ranges (``sizes`` bytes each) in batches of at most
    :data:`BATCH_BYTES` (one range at least): ``(a, b)`` index spans."""
    out, a, total = [], 0, 0
    for i, size in enumerate(sizes.tolist()):
        if i > a and total + size > BATCH_BYTES:
            out.append((a, i))
            a, total = i, 0
        total += size
    out.append((a, len(sizes)))
    return out


def npy_header(data: bytes) -> tuple[tuple[int, ...], bool, Any, int]:
    """``(shape, fortran_order, dtype, offset of the data)`` of the ``.npy`` file starting
    with ``data`` (its header at least); ValueError with the reader's first line (at most
    120 characters) when it is not one."""
    fmt = np.lib.format
    fh = io.BytesIO(data)
    try:
        version = fmt.read_magic(fh)
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else \
            fmt.read_array_header_2_0
        shape, fortran, dt = read_header(fh)
    except Exception as exc:
        raise ValueError((str(exc).splitlines() or [type(exc).__name__])[0][:120]) from None
    return tuple(shape), bool(fortran), dt, fh.tell()
