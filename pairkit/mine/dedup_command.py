"""``pairkit dedup`` from a store folder to a table file, a list of paths or stdout (the
command's store-to-files step): :func:`dedup_to_files`."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pairkit.errors import PairkitError, UsageError
from pairkit.mine.dedup import DEFAULT_KEEP, DedupConfig, check_dedup


def dedup_to_files(store: str | Path, output: str, cfg: DedupConfig, *,
                   against: str | Path | None = None, paths_only: bool = False,
                   print0: bool = False, drop: bool = False, force: bool = False,
                   warn: Callable[[str], None] = lambda _: None, pairs: Any = None,
                   progress: Callable[[int], None] | None = None,
                   on_start: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Group the store at ``store`` (:func:`pairkit.mine.dedup.run_dedup`) or, with
    ``against``, list its sources that duplicate the other store's
    (:func:`pairkit.mine.dedup.run_against`); write the table (``drop``: only the rows to
    remove) or its paths (``paths_only``, NUL-terminated with ``print0``) to ``output``
    (``-``: stdout). Outputs are checked before any work and written atomically. Returns
    the summary, with ``seconds`` and ``stdout_closed`` (the reader of ``-`` went away:
    not an error). ``pairs``: the Ray pair search (``--ray``), see
    :func:`~pairkit.mine.dedup.run_dedup`; ``on_start``/``progress``: the progress hook of
    its search (``on_start(sources)``, then ``progress(m)`` adding up to it)."""
    from pairkit.core.options import table_output
    from pairkit.core.tables import TABLE_SUFFIXES, reader_gone, write_table
    from pairkit.mine.dedup import run_against, run_dedup

    if print0 and not paths_only:
        raise UsageError("--print0 needs --paths-only")
    if against is not None and drop:
        raise UsageError("--drop does not apply to --against: every row is a leak")
    if against is not None and cfg.keep != DEFAULT_KEEP:
        raise UsageError("--keep does not apply to --against: every leak is listed, none "
                         "kept")
    check_dedup(cfg)
    if not paths_only:
        table_output(output)
    if output != "-":
        from pairkit.core.atomic import check_output
        from pairkit.core.paths import check_output_apart
        from pairkit.core.tables import check_table_output

        check_output_apart(output, [store] if against is None else [store, against])
        if paths_only and str(output).endswith(("/", os.sep)):  # Path() drops the slash
            raise UsageError(f"output {output} ends in /, a folder: --paths-only writes a "
                             "text file; give a file name (paths.txt)")
        if paths_only and Path(str(output)).suffix.lower() in TABLE_SUFFIXES:
            raise UsageError(f"--paths-only writes plain lines, not a table: -o {output} "
                             "names a table file; choose another name (paths.txt)")
        (check_output if paths_only else check_table_output)(output, force)
    t0 = time.perf_counter()
    if against is not None:
        if pairs is not None:
            raise UsageError("dedup --against runs here: drop --ray")
        table, summary = run_against(store, cfg, against, warn, progress, on_start)
    else:
        table, summary = run_dedup(store, cfg, warn, pairs, progress, on_start)
    if drop:  # the copies whose files are still as embedded, their kept files too
        from pairkit.mine.dedup_drop import safe_drops

        table = safe_drops(table, store, warn)
    summary["stdout_closed"] = reader_gone(
        (lambda: write_paths(table["path"].tolist(), output, force,
                             "\0" if print0 else "\n")) if paths_only
        else (lambda: write_table(table, output, force)))
    summary["seconds"] = time.perf_counter() - t0
    return summary


def write_paths(paths: list[str], output: str, force: bool, end: str) -> None:
    """One path per line (``end``: newline or NUL) to ``output`` or stdout (``-``); a path
    that holds ``end`` is refused rather than split."""
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
    with atomic_open(target, replace=force) as fh:
        fh.write(text)
