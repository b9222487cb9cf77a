"""``pairkit eval`` from a store folder (and a head folder, a second store) to metrics and
plot files (the command's store-to-files step, :func:`eval_to_files`): reading the stores
and the head, writing the plots. The metrics themselves live in :mod:`pairkit.eval.run`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.core.columns import Coded
from pairkit.errors import PairkitError
from pairkit.eval.run import EvalConfig, EvalReport, EvalSide, SearchHook, evaluate


@dataclass(frozen=True)
class Sides:
    """Queries and references read from stores; ``self_rows`` when they share rows."""

    queries: EvalSide
    references: EvalSide
    self_rows: np.ndarray | None
    dim: int
    encoder: dict[str, Any] | None = None  # the store's (a head trained on another is refused)
    name: str = ""  # the store's path, for messages


def _side(store: Any, rows: np.ndarray | None = None, where: str = "here",
          columns: tuple[Coded | None, Coded] | None = None) -> EvalSide:
    """The side of ``store``'s ``rows`` (None: all). ``where``: ``here``, its vectors in
    memory; ``workers``, the rows left in the store (a :class:`~pairkit.core.row_view.RowView`:
    the workers read the references for the search, this process the queries block by
    block and the rows a metric samples).
    ``columns``: the rows' labels and sources as codes (:func:`coded_columns`,
    :func:`split_columns`), which the side takes instead of the parsed item table's Python
    objects (``eval --ray``)."""
    if where == "here":
        vectors = store.vectors(store.dtype)
        vectors = vectors if rows is None else vectors[rows]
    else:
        from pairkit.core.row_view import store_view

        view = store_view(store)
        vectors = view if rows is None else view.subset(rows)
    if columns is not None:  # already the rows' (split_columns)
        labels, sources = columns
        if labels is not None and not (labels.codes >= 0).any():
            labels = None
        return EvalSide(vectors, labels, sources)
    sources = store.items["source"].to_numpy(dtype=object)
    labels = store.labels()
    if rows is not None:
        sources = sources[rows]
        labels = None if labels is None else labels[rows]
        if labels is not None and all(v is None for v in labels):
            labels = None
    return EvalSide(vectors, labels, sources)


def coded_columns(store: Any) -> tuple[Coded | None, Coded]:
    """The store's labels (None: no label at all) and sources as codes, read from its
    item table's file without parsing the table, whose bytes are then let go."""
    from pairkit.core.columns import store_column
    from pairkit.core.heap import return_free_memory

    labels = store_column(store, "label")
    sources = store_column(store, "source", distinct="many")
    store.release_items()
    return_free_memory()  # the encodings' temporaries
    return (labels if (labels.codes >= 0).any() else None), sources


def check_eval(cfg: EvalConfig, head_path: Path | None) -> None:
    """The options and the ``--head`` folder, checked before any store or library loads
    (:func:`pairkit.eval.run.check_eval_config`, :func:`pairkit.train.head.read_head_config`)."""
    from pairkit.eval.run import check_eval_config

    check_eval_config(cfg)
    if head_path is not None:
        from pairkit.train.head import read_head_config

        read_head_config(head_path)


def load_sides(store_path: Path, against: Path | None, test_fraction: float,
               seed: int, on_workers: bool = False) -> Sides:
    """Open the store(s) and split them into queries and references. ``on_workers``
    (``eval --ray``): both sides stay in the store (:func:`_side`): the references are
    read by the workers that search them, the queries here a block of ``--batch-size``
    rows at a time as each pass over them reads them (the search, the linear probe's
    predictions; the geometry's and the plot's samples in one read each), so this process
    never holds them all; a store on object storage is opened by its manifest, its shards
    fetched when read."""
    from pairkit.core.remote import is_url
    from pairkit.core.store import Store
    from pairkit.eval.split import check_compatible, split_by_source

    def opened(path: Path) -> Any:
        return Store.open(path, verify=not (on_workers and is_url(path)))

    where = "workers" if on_workers else "here"  # both sides
    store = opened(store_path)
    if store.count == 0:
        raise PairkitError(f"store {store_path} is empty")
    # on the workers: labels and sources as codes, no Python object per reference
    columns = coded_columns(store) if on_workers else None
    if against is not None:
        test = opened(against)
        if test.count == 0:
            raise PairkitError(f"store {against} is empty")
        check_compatible(store.dim, store.encoder, test.dim, test.encoder, str(store_path),
                         str(against))
        same = test.content_id == store.content_id
        test_columns = coded_columns(test) if on_workers else None
        return Sides(_side(test, where=where, columns=test_columns),
                     _side(store, where=where, columns=columns),
                     np.arange(test.count) if same else None, store.dim, store.encoder,
                     str(store_path))
    source_codes = store.source_codes() if columns is None else columns[1].codes
    is_test = split_by_source(source_codes, test_fraction, seed)
    q_rows, r_rows = np.flatnonzero(is_test), np.flatnonzero(~is_test)
    if columns is None:
        return Sides(_side(store, q_rows, where), _side(store, r_rows, where), None,
                     store.dim, store.encoder, str(store_path))
    del source_codes
    q_cols, r_cols = split_columns(columns, q_rows, r_rows)
    del columns
    return Sides(_side(store, q_rows, where, q_cols), _side(store, r_rows, where, r_cols),
                 None, store.dim, store.encoder, str(store_path))


def split_columns(columns: tuple[Coded | None, Coded], q_rows: np.ndarray,
                  r_rows: np.ndarray
                  ) -> tuple[tuple[Coded | None, Coded], tuple[Coded | None, Coded]]:
    """The queries' and the references' labels and sources, numbered in order of first
    appearance over the queries then the references (the codes the evaluation gives the
    two sides joined: :func:`pairkit.core.columns.joint_codes`, which then keeps them
    without a copy), each pair sharing its distinct values."""
    from pairkit.core.columns import renumbered

    def split(col: Coded) -> tuple[Coded, Coded]:
        q, r, old = renumbered(col.codes[q_rows], col.codes[r_rows], len(col.values))
        values = col.values.take(old)
        return Coded(q, values), Coded(r, values)

    labels, sources = columns
    q_labels, r_labels = (None, None) if labels is None else split(labels)
    q_sources, r_sources = split(sources)
    return (q_labels, q_sources), (r_labels, r_sources)


class HeadMap:
    """A trained head as the function of a :class:`~pairkit.core.row_view.RowView`: rows
    in, the head's outputs out, on ``device`` here and on the CPU of a worker it is
    shipped to."""

    def __init__(self, head: Any, device: str) -> None:
        self.head, self.device = head, device

    def __getstate__(self) -> dict[str, Any]:
        return {"head": self.head, "device": "cpu"}

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return self.head.apply(rows, device=self.device)  # type: ignore[no-any-return]


def _with_head(side: EvalSide, head: Any, device: str) -> EvalSide:
    from pairkit.core.row_view import is_view

    if is_view(side.vectors):  # through the head as they are read, here or on a worker
        return EvalSide(side.vectors.mapped(HeadMap(head, device), head.out_dim),
                        side.labels, side.sources)
    return EvalSide(head.apply(side.vectors, device=device), side.labels, side.sources)


def plot_names(names: list[str], maps: tuple[str, ...] = ("pca",)) -> list[str]:
    """File names ``--plot`` writes for these runs ("raw", "head") and map methods."""
    from pairkit.eval.plots import map_file

    prefixes = [f"{n}_" for n in names] if len(names) > 1 else [""]
    files = ["scores.png", *(map_file(m) for m in maps)]
    return [f"{p}{f}" for p in prefixes for f in files]


def run_eval(sides: Sides, cfg: EvalConfig, head_path: Path | None, compare: bool,
             plot: Path | None, force: bool = False, index_factory: Any = None,
             maps: tuple[str, ...] = ("pca",), hook: SearchHook | None = None,
             ) -> tuple[dict[str, dict[str, Any]], dict[str, EvalReport]]:
    """Evaluate raw and/or head vectors. Returns (metrics by name, reports by name);
    names are "raw" and "head". Existing plot files are kept unless ``force``.
    ``index_factory``, ``hook``: see :func:`pairkit.eval.run.evaluate`. ``maps``: the 2-D
    maps ``plot`` gets (pca, umap: :func:`pairkit.eval.plots.write_plots`)."""
    from pairkit.core.devices import resolve_device

    names = (["raw"] if head_path is None or compare else []) + (["head"] if head_path else [])
    if plot is not None:
        from pairkit.core.remote import check_local

        check_local(plot, "--plot")
        from pairkit.eval.plots import check_map_methods

        check_map_methods(maps)
        if plot.exists() and not plot.is_dir():
            raise PairkitError(f"--plot {plot} is a file, expected a folder")
        existing = [n for n in plot_names(names, maps) if (plot / n).exists()]
        if existing and not force:
            raise PairkitError(f"{plot / existing[0]} exists; pass --force to overwrite it")

    runs: dict[str, tuple[EvalSide, EvalSide]] = {}
    if head_path is None or compare:
        runs["raw"] = (sides.queries, sides.references)
    if head_path is not None:
        from pairkit.train.head import check_head_encoder, load_head

        head = load_head(head_path)
        if head.in_dim != sides.dim:  # first: whatever the encoder records say
            raise PairkitError(f"head {head_path} takes vectors of dim {head.in_dim}, the "
                               f"store has dim {sides.dim}")
        if sides.encoder is not None:
            check_head_encoder(head_path, head.config, sides.encoder, sides.name)
        device = resolve_device(cfg.device)
        runs["head"] = (_with_head(sides.queries, head, device),
                        _with_head(sides.references, head, device))
    results: dict[str, dict[str, Any]] = {}
    reports: dict[str, EvalReport] = {}
    for name, (q, r) in runs.items():
        report = evaluate(q, r, cfg, self_rows=sides.self_rows, index_factory=index_factory,
                          hook=hook)
        reports[name] = report
        results[name] = report.metrics
    if plot is not None:  # after every run: an interrupted eval leaves no half plot set
        _write_plot_set(plot, {n: q for n, (q, _r) in runs.items()}, reports, head_path,
                        cfg.seed, maps, force)
    return results, reports


def _write_plot_set(plot: Path, queries: dict[str, EvalSide], reports: dict[str, EvalReport],
                    head_path: Path | None, seed: int, maps: tuple[str, ...],
                    force: bool) -> None:
    """Draw every run's plots into a temp folder inside ``plot``, then move them in
    together. Without ``force`` a plot another run wrote meanwhile stops the commit (one
    line) and none of this run's plots stay; a ``plot`` folder made here and left empty
    is removed again."""
    import contextlib

    from pairkit.core.atomic import (
        commit_files,
        naming_target,
        remove_stale_parts,
        scratch_folder,
    )
    from pairkit.eval.plots import write_plots

    created = not plot.exists()
    with naming_target(plot):
        plot.mkdir(parents=True, exist_ok=True)
    scratch = plot / "plots"  # temp folders .plots.XXXXXXXX.tmp; a killed run's go in a day
    remove_stale_parts(scratch)
    done = False
    try:
        with scratch_folder(scratch) as tmp:
            written: list[Path] = []
            for name, q in queries.items():
                labels = q.labels.objects() if isinstance(q.labels, Coded) else q.labels
                written += write_plots(
                    tmp, reports[name].scores, q.vectors, labels,
                    prefix=f"{name}_" if len(queries) > 1 else "", seed=seed, maps=maps,
                    head_name=Path(head_path).name if name == "head" and head_path else None)
            commit_files(tmp, [p.name for p in written], plot, replace=force)
            done = True
    finally:
        if created and not done:
            with contextlib.suppress(OSError):
                plot.rmdir()  # only when empty (after the temp folder's removal)


def eval_to_files(store: Path, plot: Path | None, cfg: EvalConfig, *,
                  against: Path | None = None, test_fraction: float = 0.2,
                  head: Path | None = None, compare: bool = False,
                  maps: tuple[str, ...] = ("pca",), force: bool = False,
                  index_factory: Any = None, hook: SearchHook | None = None,
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, EvalReport]]:
    """Evaluate the store at ``store`` (:func:`check_eval`, :func:`load_sides`,
    :func:`run_eval`): queries from ``against`` or a ``test_fraction`` of its sources
    (seeded by ``cfg.seed``), raw and/or ``head`` vectors; the plots go to the folder
    ``plot`` (None: none); ``hook``: the searches' progress
    (:class:`~pairkit.eval.run.SearchHook`). Returns (metrics by name, reports by name)."""
    check_eval(cfg, head)
    if against is None:
        from pairkit.eval.split import check_fraction

        check_fraction(test_fraction)  # before the store's items (pandas) are read
    if plot is not None:
        from pairkit.core.paths import check_folder_output, check_output_apart

        check_folder_output(plot, "--plot", "the plots are a folder")
        check_output_apart(plot, [store, against, head], "--plot")
    sides = load_sides(store, against, test_fraction, cfg.seed,
                       on_workers=getattr(index_factory, "reads_store", False))
    return run_eval(sides, cfg, head, compare, plot, force, index_factory, maps, hook)
