"""Build a report folder from pair tables, dedup groups and eval results.

The folder is built beside its target under a temporary name and renamed into
place when complete, so a reader never sees half a report; ``--force`` replaces
only a folder that is empty or holds an earlier pairkit report. Without ``--force`` a
report that another run put at the target meanwhile is never replaced (one line). An
output that is a link to a folder is written through: the report replaces the folder
the link names, and the link stays. Temp folders of killed runs (``.NAME.XXXXXXXX.tmp``)
are removed by a later report to that output once a day old.
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pairkit import __version__
from pairkit.core.atomic import remove_stale_parts, scratch_folder, swap_folder
from pairkit.core.table_items import table_mismatch
from pairkit.errors import PairkitError, UsageError
from pairkit.report.dedup_view import build_dedup_section
from pairkit.report.eval_view import build_eval_section, copy_plots
from pairkit.report.inputs import ReportInput, read_input
from pairkit.report.items import ItemTable
from pairkit.report.page import GENERATOR, render_page
from pairkit.report.pairs_view import build_pairs_section
from pairkit.report.search_view import build_search_section
from pairkit.report.stores import StoreInfo, find_store, open_for_report

INDEX = "index.html"
DEFAULT_SAMPLE = 500
DEFAULT_THUMB_SIZE = 96


@dataclass(frozen=True)
class ReportConfig:
    inputs: tuple[str, ...]
    output: Path
    store: Path | None = None
    sample: int = DEFAULT_SAMPLE
    seed: int = 0
    thumb_size: int = DEFAULT_THUMB_SIZE
    title: str | None = None
    force: bool = False
    workers: int | None = None


@dataclass
class ReportResult:
    index: Path
    sections: list[str] = field(default_factory=list)  # one line per section
    notes: list[str] = field(default_factory=list)
    thumbnails: int = 0
    bytes: int = 0
    seconds: float = 0.0


def check_config(cfg: ReportConfig) -> None:
    """Raise UsageError for option values out of range."""
    if not cfg.inputs:
        raise UsageError("give at least one INPUT")
    if cfg.sample < 0:
        raise UsageError(f"--sample must be >= 0 (0 = all), got {cfg.sample}")
    if not 16 <= cfg.thumb_size <= 512:
        raise UsageError(f"--thumb-size must be in 16..512, got {cfg.thumb_size}")
    if sum(s == "-" for s in cfg.inputs) > 1:
        raise UsageError("stdin (-) can be read once")


def check_output_dir(out: Path, force: bool) -> None:
    """Refuse an existing non-empty folder unless ``force`` and it is an earlier report."""
    if not out.exists():
        return
    if not out.is_dir():
        raise PairkitError(f"output {out} is a file, expected a folder")
    if not any(out.iterdir()):
        return
    if not force:
        raise PairkitError(f"output {out} exists; pass --force to replace it")
    if not _is_report(out):
        raise PairkitError(
            f"output {out} is not a pairkit report folder (no {INDEX} made by pairkit "
            "report); refusing to replace it")


def _real(path: Path, what: str) -> Path:
    """``path`` resolved; PairkitError for a symlink loop or a folder closed to this user."""
    try:
        return path.resolve()
    except RuntimeError:  # Python < 3.13 reports a symlink loop so
        raise PairkitError(f"{what} {path} not found (a symlink loop)") from None
    except OSError as exc:
        raise PairkitError(f"{what} {path} is unreadable ({exc.strerror or exc})") from None


def _check_not_inside(out: Path, paths: list[str]) -> None:
    """Refuse an output folder that holds an input: replacing it would lose the input."""
    from pairkit.core.paths import check_output_apart

    target = _real(out, "output")
    for p in paths:
        if p == "-" or "://" in p:
            continue
        real = _real(Path(p), "input")
        if real == target:  # -o the store itself (or a table) is not "inside"
            raise UsageError(f"-o {out} is the input {p}: choose another -o")
        if real.is_relative_to(target):
            raise UsageError(f"input {p} is inside the output folder {out}; choose another -o")
    check_output_apart(out, paths)  # nor is a report written into a store


def _is_report(folder: Path) -> bool:
    index = folder / INDEX
    try:
        with open(index, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR}">' in head


def build_report(cfg: ReportConfig, progress: Callable[[int], None] | None = None,
                 on_start: Callable[[int], None] | None = None,
                 on_phase: Callable[[str], None] | None = None) -> ReportResult:
    """Read the inputs, build the views and thumbnails, write the folder; see module doc.
    ``on_start(files)``/``progress(1)`` per thumbnail made: the thumbnails' progress hook
    (:func:`pairkit.report.thumbs.make_thumbnails`; ``files`` may be 0); ``on_phase(line)``
    as each input is read (a large table takes a while)."""
    t0 = time.perf_counter()
    check_config(cfg)
    from pairkit.core.paths import check_folder_output
    from pairkit.core.remote import check_local

    check_folder_output(cfg.output, "-o", "a report is a folder")
    check_local(cfg.output, "output")  # a report folder is local: no folder named s3:
    out = Path(cfg.output)
    _check_not_inside(out, [*cfg.inputs, *([str(cfg.store)] if cfg.store else [])])
    check_output_dir(out, cfg.force)
    inputs = []
    for spec in cfg.inputs:
        if on_phase is not None:
            on_phase(f"reading {'stdin' if spec == '-' else spec}")
        inputs.append(read_input(spec))
    explicit = open_for_report(cfg.store) if cfg.store is not None else None
    result = ReportResult(index=out / INDEX)
    place = Path(os.path.realpath(out)) if out.is_symlink() else out  # a link: its folder
    place.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(place)  # temp folders of killed runs, a day old
    with scratch_folder(place) as tmp:
        data = _build(inputs, explicit, cfg, tmp, result, progress=progress,
                      on_start=on_start)
        title = cfg.title or "pairkit report: " + ", ".join(i.name for i in inputs)
        data["title"] = title
        page = render_page(data, title)
        (tmp / INDEX).write_text(page, encoding="utf-8")
        os.chmod(tmp, 0o777 & ~_umask())
        _swap_into_place(tmp, place, cfg.force, out)
    result.bytes = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    result.seconds = time.perf_counter() - t0
    return result


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _swap_into_place(tmp: Path, place: Path, force: bool, out: Path) -> None:
    """Rename the finished folder ``tmp`` to ``place`` (``out``, or the folder the link
    ``out`` names). Without ``force`` only a missing or empty folder is taken (one rename,
    which fails on a folder with files), so a report another run put there meanwhile
    stays; with ``force`` an earlier report is renamed away first and removed after."""
    if not force:
        try:
            os.rename(tmp, place)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
            raise PairkitError(f"output {out} was written by another run meanwhile; this "
                               "run's report was not written (pass --force to replace it)"
                               ) from None
        return
    check_output_dir(place, force)  # what appeared meanwhile: only a report is replaced
    swap_folder(tmp, place)


def _store_for(inp: ReportInput, explicit: StoreInfo | None, notes: list[str], out: Path
               ) -> StoreInfo | None:
    assert inp.table is not None
    fmt = inp.fmt or "dedup"
    if explicit is not None:
        why = table_mismatch(inp.table, fmt, explicit.store, inp.apart)
        if why:
            raise PairkitError(f"{inp.name} does not belong to store {explicit.store.root}: {why}")
        return explicit
    found = find_store(inp.table, fmt, inp.path, inp.apart)
    if found is not None:  # nor into the store found beside the table
        from pairkit.core.paths import check_output_apart

        check_output_apart(out, [found.store.root])
    if found is None:
        notes.append(f"no store found for {inp.name} (looked in its folder, the folder above "
                     "and their sub-folders): no labels or thumbnails; pass --store STORE")
    return found


def _build(inputs: list[ReportInput], explicit: StoreInfo | None, cfg: ReportConfig,
           tmp: Path, result: ReportResult, **hooks: Any) -> dict[str, Any]:
    items = ItemTable()
    sections: list[dict[str, Any]] = []
    notes = result.notes
    plot_count = 0
    eval_section: dict[str, Any] | None = None
    eval_line = -1
    for inp in inputs:
        if inp.kind in ("pairs", "dedup", "search"):
            info = _store_for(inp, explicit, notes, Path(cfg.output))
            if info is not None and info.note and info.note not in notes:
                notes.append(info.note)
            labels = info.store.labels() if info is not None else None
            ref = items.ref(info)
            assert inp.table is not None
            if inp.kind == "pairs":
                sec = build_pairs_section(inp.name, inp.table, inp.fmt or "triplet",
                                          sample=cfg.sample, seed=cfg.seed, labels=labels,
                                          ref=ref, rows=inp.rows)
                s = sec["summary"]
                result.sections.append(
                    f"{inp.name}: {s['anchors_shown']:,} of {s['anchors']:,} anchors "
                    f"({s['format']}), {s['flagged']:,} of {s['negatives']:,} negatives flagged")
            elif inp.kind == "search":
                sec = build_search_section(inp.name, inp.table, sample=cfg.sample,
                                           labels=labels, ref=ref)
                s = sec["summary"]
                result.sections.append(
                    f"{inp.name}: {s['queries_shown']:,} of {s['queries']:,} queries, "
                    f"{s['rows']:,} neighbours")
            else:
                sec = build_dedup_section(inp.name, inp.table, sample=cfg.sample,
                                          labels=labels, ref=ref)
                s = sec["summary"]
                result.sections.append(
                    f"{inp.name}: {s['groups_shown']:,} of {s['groups']:,} groups, "
                    f"{s['drop']:,} copies to drop")
            sec["store"] = str(info.store.root) if info is not None else None
            sections.append(sec)
        else:
            entries, skipped = copy_plots(inp.plots, tmp, plot_count)
            plot_count += len(inp.plots)
            notes.extend(skipped)
            if inp.kind == "eval" or eval_section is None:
                eval_section = build_eval_section(inp.name, inp.results, entries)
                sections.append(eval_section)
                eval_line = len(result.sections)
                result.sections.append(f"{inp.name}: " + (
                    f"{len(eval_section['rows'])} metrics" if inp.results
                    else f"{len(entries)} plots"))
            else:  # plots after an eval result (or other plots) join that section
                eval_section["plots"].extend(entries)
                result.sections[eval_line] += f" + {len(entries)} plots"
    result.thumbnails = items.add_thumbnails(tmp, cfg.thumb_size, cfg.workers, **hooks)
    return {
        "generator": f"pairkit {__version__}",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": [i.name for i in inputs],
        "notes": notes,
        "items": items.rows,
        "sections": sections,
    }

