"""Import embeddings computed elsewhere as a store."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pairkit.core.items import item_views
from pairkit.core.manifest import check_store_dtype
from pairkit.core.paths import check_folder_output, check_output_apart, first_bad_path
from pairkit.core.store import Store, sha256_file
from pairkit.core.store_writer import write_store
from pairkit.core.tables import read_table
from pairkit.errors import PairkitError, UsageError


def load_npy(path: str | Path) -> np.ndarray:
    """A 2-D numeric array from a .npy file (memory-mapped), with clear errors."""
    from pairkit.core.remote import check_local_only

    check_local_only(path, "embeddings file")  # not "not found" for an object that exists
    p = Path(path)
    if p.is_dir():
        raise PairkitError(f"embeddings file {p} is a folder, expected a .npy file")
    if not p.is_file():
        raise PairkitError(f"embeddings file {p} not found")
    try:
        with open(p, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise PairkitError(f"can't read {p} ({exc.strerror})") from None
    if magic.startswith(b"PK"):
        raise PairkitError(f"{p} is an .npz archive, expected a .npy file (np.save of one "
                           "2-D array)")
    if magic != b"\x93NUMPY":
        raise PairkitError(f"{p} is not a .npy file (no NumPy header)")
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as exc:
        raise PairkitError(f"{p} is not a readable .npy file ({exc})") from exc
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise PairkitError(f"{p} must hold a 2-D array (N, dim), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise PairkitError(f"{p} holds {arr.dtype}, expected real numbers")
    return arr


def bad_rows(vectors: np.ndarray, block: int = 8192
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row numbers holding NaN or inf; rows of finite values beyond float64's range; rows
    whose nonzero values are all below it; rows that are all zeros: four int64 arrays,
    found in one streamed pass (memory O(block x dim)). Only a longdouble input has
    values float64 can't hold (they overflow to inf or underflow to 0 when cast)."""
    found: list[list[np.ndarray]] = [[np.zeros(0, dtype=np.int64)] for _ in range(4)]
    wide = np.dtype(vectors.dtype).itemsize > 8 and np.issubdtype(vectors.dtype, np.floating)
    for start in range(0, len(vectors), block):
        raw = np.asarray(vectors[start : start + block])
        # float64 keeps values beyond float32's range finite (normalisation rescales them)
        with np.errstate(over="ignore", under="ignore"):
            chunk = raw.astype(np.float64)
        finite, nonzero = np.isfinite(chunk).all(axis=1), chunk.any(axis=1)
        raw_finite, raw_nonzero = (np.isfinite(raw).all(axis=1), raw.any(axis=1)) if wide \
            else (finite, nonzero)
        found[0].append(np.flatnonzero(~raw_finite) + start)
        found[1].append(np.flatnonzero(raw_finite & ~finite) + start)
        found[2].append(np.flatnonzero(finite & raw_nonzero & ~nonzero) + start)
        found[3].append(np.flatnonzero(~raw_nonzero) + start)
    nonfinite, overflow, underflow, zero = (np.concatenate(rows) for rows in found)
    return nonfinite, overflow, underflow, zero


def row_list(rows: np.ndarray, shown: int = 5) -> str:
    """``row 2`` or ``rows 0, 1, 2, 3, 4 ...``: the first ``shown`` of ``rows``."""
    listed = ", ".join(str(i) for i in rows[:shown]) + (" ..." if len(rows) > shown else "")
    return f"row{'s' if len(rows) > 1 else ''} {listed}"


def import_embeddings(
    embeddings: str | Path,
    items: str | Path,
    output: str | Path,
    *,
    dtype: str = "float16",
    encoder: str = "imported",
    force: bool = False,
) -> Store:
    """Write ``embeddings`` (N, dim) with ``items`` (N rows, ``path`` required) as a store.

    Item paths must be relative to the image root and stay under it (no absolute paths,
    no ``..``); the store's writer lock is held while it is written.
    """
    if not encoder or not encoder.isprintable():
        raise UsageError(f"--encoder must be a printable name, got {encoder!a}")
    check_store_dtype(dtype)  # before any reading
    check_folder_output(output, "-o", "a store is a folder")
    check_output_apart(output, [embeddings, items])
    vectors = load_npy(embeddings)
    table = read_table(items)
    if "path" not in table.columns:
        raise PairkitError(f"items {items} need a 'path' column (found: "
                           f"{', '.join(map(str, table.columns))})")
    paths = table["path"]
    bad_path = first_bad_path(["" if missing else str(p) for p, missing in
                               zip(paths.tolist(), paths.isna().tolist(), strict=True)])
    if bad_path is not None:
        row, value, reason = bad_path
        raise PairkitError(f"items {items} row {row}: path {value!a} {reason}")
    views = int(item_views(table["view"]).max()) + 1 if "view" in table and len(table) else 1
    if len(table) != len(vectors):
        raise PairkitError(f"{embeddings} has {len(vectors)} rows but {items} has {len(table)}")
    if len(vectors) == 0:
        raise PairkitError(f"{embeddings} has no rows")
    bad, overflow, underflow, zero = bad_rows(vectors)
    if len(bad):
        rows = "1 row contains" if len(bad) == 1 else f"{len(bad):,} rows contain"
        raise PairkitError(f"{rows} NaN or inf ({row_list(bad)}); fix or drop them")
    for odd, what, becomes in ((overflow, "values beyond", "overflow to inf"),
                               (underflow, "only values below", "underflow to zeros")):
        if len(odd):
            rows = "1 row holds" if len(odd) == 1 else f"{len(odd):,} rows hold"
            raise PairkitError(f"{rows} {what} float64's range ({row_list(odd)}), which "
                               f"{becomes} in pairkit's float32/float64 arithmetic; "
                               "rescale or drop them")
    if len(zero):
        rows = "1 row is" if len(zero) == 1 else f"{len(zero):,} rows are"
        raise PairkitError(f"{rows} all zeros ({row_list(zero)}): no direction")
    info = {"name": encoder, "imported_from": Path(embeddings).name,
            "sha256": sha256_file(embeddings)}
    return write_store(output, vectors, table, encoder=info, dtype=dtype, force=force,
                       extra={"views": views})
