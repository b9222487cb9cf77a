"""pairkit dedup: exact and near-duplicate groups of a store's sources."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pairkit.cli.common import say, user_errors, warn
from pairkit.errors import PairkitError, UsageError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# Keep in step with pairkit.mine.near_duplicates.DEFAULT_THRESHOLD (a test checks it).
DEFAULT_THRESHOLD_TEXT = "0.965"


@dataclass(frozen=True)
class DedupConfig:
    store: Path
    threshold: float | None
    keep: str
    exact_only: bool
    batch_size: int
    device: str
    backend: str = "auto"


def dedup(
    store: Path = typer.Argument(..., help="Store folder (made by embed or import)."),
    threshold: float | None = typer.Option(
        None, "--threshold", "-t",
        help=f"Similarity for a near-duplicate, in (0, 1] (default {DEFAULT_THRESHOLD_TEXT}, "
        "measured with the pixels encoder; see docs/dedup.md for other encoders).",
    ),
    keep: str = typer.Option(
        "first", "--keep",
        help="Representative kept per group: first (lowest id), largest (image area under "
        "the store's image_root, then file size), central (most similar to the others).",
    ),
    output: str = typer.Option(
        "-", "-o", "--output",
        help="Table file (.parquet/.csv/.jsonl) or - for JSON Lines on stdout.",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
    paths_only: bool = typer.Option(
        False, "--paths-only", help="Print only paths, one a line, instead of the table."
    ),
    drop: bool = typer.Option(
        False, "--drop", help="Only the items to remove (every member but the kept one)."
    ),
    absolute: bool = typer.Option(
        False, "--absolute", help="Paths joined to the store's image_root (absolute)."
    ),
    print0: bool = typer.Option(
        False, "--print0", "-0", help="With --paths-only: end paths with NUL (xargs -0)."
    ),
    exact_only: bool = typer.Option(
        False, "--exact-only", help="Only byte-identical files (same file_sha256)."
    ),
    batch_size: int = typer.Option(4096, "--batch-size", help="Query rows per search block."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda (FAISS GPU)."),
    backend: str = typer.Option(
        "auto", "--backend",
        help="Search engine: auto (FAISS GPU indices when faiss-gpu sees a GPU, else the exact "
        "torch search on CUDA when torch sees one, else FAISS on the CPU), faiss or torch."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr."),
) -> None:
    """Find exact duplicates (file hash) and near-duplicates (embedding similarity).

    Views of one source are never duplicates of each other: each source is
    compared by its view 0. Every member of a group is within the threshold of
    the group's kept representative (long chains are split).

    Example: pairkit dedup store --paths-only --drop | xargs -d '\\n' rm --
    """
    with user_errors():
        if print0 and not paths_only:
            raise UsageError("--print0 needs --paths-only")
        if batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
        if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
            raise UsageError(f"--device must be auto, cpu or cuda, got {device}")
        from pairkit.index.backend import check_backend_text

        cfg = DedupConfig(store, threshold, keep, exact_only, batch_size, device,
                          check_backend_text(backend))
        t0 = time.perf_counter()
        table, summary = run_dedup(cfg, absolute)
        if drop:
            table = table[~table["keep"]].reset_index(drop=True)
        try:
            if paths_only:
                _write_paths(table["path"].tolist(), output, force, "\0" if print0 else "\n")
            else:
                from pairkit.core.tables import write_table

                write_table(table, output, force)
            reader_gone = False
        except BrokenPipeError:
            reader_gone = True  # `| head`: not an error; main() exits quietly
        summary["seconds"] = time.perf_counter() - t0
        say(_summary_line(summary), quiet)
    if reader_gone:
        raise BrokenPipeError


def run_dedup(cfg: DedupConfig, absolute: bool) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Open the store, group its sources; return the table (with paths) and a summary."""
    import numpy as np

    from pairkit.core.store import Store
    from pairkit.mine.near_duplicates import (
        DEFAULT_THRESHOLD,
        KEEP_RULES,
        check_threshold,
        find_near_duplicates,
    )

    threshold = check_threshold(DEFAULT_THRESHOLD if cfg.threshold is None else cfg.threshold)
    if cfg.keep not in KEEP_RULES:
        raise UsageError(f"--keep must be one of {', '.join(KEEP_RULES)}, got {cfg.keep}")
    st = Store.open(cfg.store)
    items = st.items
    image_root = st.manifest.get("image_root")
    if absolute and not image_root:
        raise UsageError(
            f"--absolute needs the store's image_root, and {cfg.store} has none "
            "(made by import?)"
        )
    paths = items["path"].to_numpy(dtype=object)
    keep, sizes = cfg.keep, None
    if keep == "largest":
        sizes = _size_reader(image_root, paths)
        if sizes is None:
            keep = "first"
    vectors = st.vectors(np.float32)
    hashes = items["file_sha256"].to_numpy(dtype=object, na_value=None)
    result = find_near_duplicates(
        vectors,
        threshold,
        file_sha256=hashes,
        sources=items["source"].to_numpy(dtype=object),
        views=items["view"].to_numpy(),
        keep=keep,
        sizes=sizes,
        near=not cfg.exact_only,
        batch_size=cfg.batch_size,
        device=cfg.device,
        backend=cfg.backend,
    )
    table = result.table
    ids = table["id"].to_numpy()
    out_paths = paths[ids]
    if absolute:
        out_paths = np.array([str(_inside(image_root, p)) for p in out_paths], dtype=object)
    table.insert(2, "path", out_paths)
    n_sources = int(items["source"].nunique()) if len(items) else 0
    summary = {
        "groups": int(table["group"].nunique()),
        "sources_in_groups": len(table),
        "sources": n_sources,
        "items_in_groups": int((result.item_group >= 0).sum()),
        "items": len(items),
        "drop": int((~table["keep"]).sum()),
        "exact": int((table["match"] == "exact").sum()),
        "near": int((table["match"] == "near").sum()),
        "split": result.components_split,
        "threshold": threshold,
        "keep": "first" if getattr(sizes, "fell_back", False) else result.keep_rule,
        "exact_only": cfg.exact_only,
    }
    return table, summary


def _size_reader(image_root: str | None, paths: np.ndarray) -> Any:
    """A function item ids -> image area (+ file bytes as tie-break), or None (warned)."""
    if not image_root or not Path(image_root).is_dir():
        warn(
            "--keep largest: the store's image_root is "
            f"{'unset' if not image_root else 'missing: ' + image_root}; using --keep first"
        )
        return None
    from pairkit.core.paths import resolve_item_path

    root = Path(image_root)

    def sizes(ids: np.ndarray) -> np.ndarray:
        import numpy as np
        from PIL import Image

        out = np.full(len(ids), np.nan)
        for k, i in enumerate(ids):
            f = resolve_item_path(root, str(paths[i]))
            if f is None:
                continue  # a path outside the image root is never opened
            try:
                with Image.open(f) as im:
                    w, h = im.size
                out[k] = float(w * h) + f.stat().st_size / 1e12
            except (OSError, ValueError, Image.DecompressionBombError):
                continue
        return out

    def checked(ids: np.ndarray) -> np.ndarray:
        import numpy as np

        got = sizes(ids)
        bad = int(np.isnan(got).sum())
        if bad:
            warn(f"--keep largest: {bad} images unreadable under {root}; using --keep first")
            checked.fell_back = True  # type: ignore[attr-defined]
            return np.asarray(-ids, dtype=float)  # larger = lower id: the 'first' rule
        return got

    checked.fell_back = False  # type: ignore[attr-defined]
    return checked


def _inside(image_root: str, path: str) -> Path:
    """``image_root / path``; PairkitError when ``path`` would leave the image root."""
    from pairkit.core.paths import path_problem

    reason = path_problem(path)
    if reason is not None:
        raise PairkitError(f"item path {path!a} {reason}: refusing to print it as an "
                           "absolute path")
    return Path(image_root) / path


def _write_paths(paths: list[str], output: str, force: bool, end: str) -> None:
    import sys

    for p in paths:
        if end in p:
            raise PairkitError(
                f"path {p!a} holds a newline, so one path per line would split it: use -0 "
                "(--print0) for NUL-terminated paths" if end == "\n" else
                f"path {p!a} holds a NUL byte: it can't be written NUL-terminated")
    text = "".join(p + end for p in paths)
    if output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from pairkit.core.atomic import atomic_open, check_output

    target = check_output(output, force)
    with atomic_open(target) as fh:
        fh.write(text)


def _summary_line(s: dict[str, Any]) -> str:
    share = s["items_in_groups"] / s["items"] if s["items"] else 0.0
    views = "" if s["sources"] == s["items"] else f" ({s['items_in_groups']} items with views)"
    how = "exact only" if s["exact_only"] else f"threshold {s['threshold']:g}"
    return (
        f"{s['groups']} groups: {s['sources_in_groups']} of {s['sources']} sources in groups"
        f"{views}, {share:.1%} of the store; {s['drop']} to drop ({s['exact']} exact, "
        f"{s['near']} near copies), keep {s['keep']}, {how}, "
        f"{s['split']} chains split, {s['seconds']:.1f} s"
    )
