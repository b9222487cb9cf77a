"""The eval view: the metrics table of ``pairkit eval --json`` and its PNG plots.

With ``--compare`` the JSON holds one object per side (``raw``, ``head``); they
become the table's columns, as in the terminal table of ``pairkit eval``.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

# the order and wording of the terminal table (pairkit eval); nested keys expand below
METRIC_ROWS = (
    ("knn_top1", "kNN top-1 (first k)"),
    ("knn_top5", "kNN top-5 (first k)"),
    ("knn_mean_per_class_recall", "kNN mean per-class recall (first k)"),
    ("knn", None),
    ("linear_top1", "linear probe top-1"),
    ("linear_mean_per_class_recall", "linear probe mean per-class recall"),
    ("linear_probe", None),
    ("precision_at_1", "precision@1"),
    ("r_precision", "R-precision"),
    ("map_at_r", "MAP@R"),
    ("recall_at_k", None),
    ("alignment", "alignment (alpha=2, lower is better)"),
    ("uniformity", "uniformity (t=2, lower is better)"),
    ("n_queries", "queries"),
    ("n_references", "references"),
    ("n_gallery", "retrieval gallery (the queries)"),
)
# how the probe was fitted (the line above the terminal table), below the probe's rows
PROBE_ROWS = (
    ("weight_decay", "linear probe weight decay"),
    ("validated", "linear probe decay chosen by validation"),
    ("balanced", "linear probe balanced (every class weighs the same)"),
)
PLOT_DIR = "plots"
MAX_PLOT_BYTES = 64 << 20


def fmt_value(value: Any) -> str:
    """A metric as the terminal table prints it: ints as they are, floats to 4 places
    (below 0.001 in ``%g``: the probe's weight decay 1e-05 is not ``0.0000``)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"
    return str(value)


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif not isinstance(value, list):
        out[prefix] = value


def metric_rows(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    """``[[title, value side 1, value side 2, ...], ...]``: known metrics first, in the
    terminal table's order, then any other key (nested keys joined with dots)."""
    sides = list(results.values())
    rows: list[list[str]] = []
    seen: set[str] = set()
    for key, title in METRIC_ROWS:
        seen.add(key)
        if key == "knn":
            ks = _keys(sides, "knn")
            for k in ks:
                cells = [f"{fmt_value(_get(s, 'knn', k, 'top1'))} / "
                         f"{fmt_value(_get(s, 'knn', k, 'top5'))}" for s in sides]
                rows.append([f"kNN k={k} top-1 / top-5", *cells])
        elif key == "linear_probe":
            named = dict(PROBE_ROWS)
            present = _keys(sides, "linear_probe")
            for k in [k for k in named if k in present] + [k for k in present
                                                           if k not in named]:
                rows.append([named.get(k, f"linear_probe.{k}"),
                             *[fmt_value(_get(s, "linear_probe", k)) for s in sides]])
        elif key == "recall_at_k":
            for k in _keys(sides, "recall_at_k"):
                rows.append([f"recall@{k}", *[fmt_value(_get(s, "recall_at_k", k))
                                              for s in sides]])
        elif any(key in s for s in sides):
            rows.append([str(title), *[fmt_value(s.get(key)) for s in sides]])
    rest: dict[str, list[Any]] = {}
    for i, side in enumerate(sides):
        flat: dict[str, Any] = {}
        _flatten("", {k: v for k, v in side.items() if k not in seen}, flat)
        for k, v in flat.items():
            rest.setdefault(k, [None] * len(sides))[i] = v
    for k in sorted(rest):
        rows.append([k, *[fmt_value(v) for v in rest[k]]])
    return rows


def _keys(sides: list[dict[str, Any]], key: str) -> list[str]:
    out: list[str] = []
    for s in sides:
        value = s.get(key)
        if isinstance(value, dict):
            out.extend(str(k) for k in value if str(k) not in out)
    return out


def _get(side: dict[str, Any], *keys: str) -> Any:
    value: Any = side
    for k in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(k)
    return value


def check_png(path: Path) -> str | None:
    """None when ``path`` is a PNG that PIL reads within its bomb limit, else why not."""
    from PIL import Image

    from pairkit.encode.images import check_pixels

    try:
        if path.stat().st_size > MAX_PLOT_BYTES:
            return f"larger than {MAX_PLOT_BYTES >> 20} MB"
        with open(path, "rb") as fh:
            if fh.read(8) != b"\x89PNG\r\n\x1a\n":
                return "not a PNG file"
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                check_pixels(im.size)  # whatever another thread did to the filters
                im.verify()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return "decompression bomb refused"
    except Exception as exc:  # unreadable or damaged: the plot is skipped, not the report
        return f"unreadable ({type(exc).__name__})"
    return None


def copy_plots(plots: list[Path], out_dir: Path, start: int = 0
               ) -> tuple[list[dict[str, str]], list[str]]:
    """Copy readable PNGs to ``out_dir/plots/`` under numbered names; returns the page
    entries ``{"file", "name"}`` and notes for the ones skipped."""
    entries, notes = [], []
    for n, path in enumerate(plots, start=start):
        problem = check_png(path)
        if problem:
            notes.append(f"plot {path} skipped: {problem}")
            continue
        name = f"{PLOT_DIR}/{n:03d}.png"
        (out_dir / PLOT_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out_dir / name)
        entries.append({"file": name, "name": path.name})
    return entries, notes


def build_eval_section(name: str, results: dict[str, dict[str, Any]],
                       plots: list[dict[str, str]]) -> dict[str, Any]:
    """The page data of one eval result (or of plots alone when ``results`` is empty)."""
    return {"kind": "eval", "name": name, "columns": list(results),
            "rows": metric_rows(results) if results else [], "plots": plots}
