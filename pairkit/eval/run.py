"""One evaluation: queries against references, every metric that can be computed.

:func:`evaluate` takes two :class:`EvalSide` (arrays in memory) and an
:class:`EvalConfig`, runs the neighbour search block by block through
``pairkit.index.search.knn_search`` and returns an :class:`EvalReport`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pairkit.core.columns import Coded, joint_codes, value_at
from pairkit.core.options import first_repeated
from pairkit.errors import PairkitError, UsageError
from pairkit.eval.geometry import (
    alignment,
    pair_dots,
    positive_pairs,
    random_pairs,
    uniformity,
)
from pairkit.eval.knn import knn_hits, knn_rank_classes
from pairkit.eval.linear_probe import class_recall
from pairkit.eval.neighbours import Exclusion, search_excluding
from pairkit.eval.retrieval import relevant_counts, retrieval_scores
from pairkit.index.search import row_chunks

METRICS = ("knn", "linear", "retrieval", "geometry")
DEFAULT_KNN_KS = (20,)
DEFAULT_RECALL_KS = (1, 5, 10)
# a search block's per-neighbour temporaries while it is scored (labels int64, the
# retrieval masks, counts and precisions): it is scored this much at a time
SCORE_BYTES = 40
LABEL_METRICS = ("knn", "linear", "retrieval")
GALLERIES = ("reference", "queries")


@dataclass(frozen=True)
class EvalConfig:
    """Options of one evaluation (defaults are the CLI's)."""

    knn_ks: tuple[int, ...] | None = None  # None: DEFAULT_KNN_KS, capped at the set's size
    knn_temperature: float = 0.07
    recall_ks: tuple[int, ...] | None = None  # None: DEFAULT_RECALL_KS, capped alike
    max_r: int = 1000
    exclude_same_source: bool = True
    gallery: str = "reference"
    metrics: tuple[str, ...] | None = None  # None: every metric the data allows
    pair_sample: int = 100_000
    probe_max_train: int = 200_000
    probe_weight_decays: tuple[float, ...] = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
    probe_max_iter: int = 300
    probe_balanced: bool = False  # every class weighs the same in the probe's fits
    seed: int = 0
    device: str = "auto"  # probe, head and search: auto, cpu, cuda or cuda:N
    backend: str = "auto"  # search engine: auto, faiss, torch (pairkit.index.backend)
    block_rows: int = 4096
    collect_scores: bool = False


@dataclass(frozen=True)
class EvalSide:
    """One side of an evaluation: vectors (n, d), labels (object (n,) or None), sources (n,).
    Labels and sources may also be :class:`~pairkit.core.columns.Coded` (integer codes into
    their distinct values: ``eval --ray``'s references, no Python object per row)."""

    vectors: np.ndarray
    labels: np.ndarray | Coded | None
    sources: np.ndarray | Coded

    def __len__(self) -> int:
        return len(self.vectors)


@dataclass
class EvalReport:
    """``metrics``: the JSON keys; ``notes``: lines for a person; ``scores``: score samples
    by kind (positive, random_negative, mined_negative) for histograms; ``details``:
    extra numbers (the retrieval queries counted and capped)."""

    metrics: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    details: dict[str, object] = field(default_factory=dict)


def _codes(values_a: Any, values_b: Any,
           na_missing: bool) -> tuple[np.ndarray, np.ndarray, Any]:
    """Joint integer codes of two columns (-1 for None). Returns (a, b, uniques).
    Object arrays, or :class:`~pairkit.core.columns.Coded` columns (``eval --ray``'s,
    whose distinct values stay a pyarrow array)."""
    if isinstance(values_a, Coded) or isinstance(values_b, Coded):
        return joint_codes(values_a, values_b)
    from pairkit.core.store import codes_of

    a = np.asarray(values_a, dtype=object)
    b = np.asarray(values_b, dtype=object)
    codes, uniques = codes_of(np.concatenate([a, b]), missing=na_missing)
    return codes[: len(a)], codes[len(a):], uniques


def _kept(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values[keep]`` (a mask), ``values`` itself when every row is kept (no copy)."""
    return values if keep.all() else values[keep]


def check_eval_config(cfg: EvalConfig) -> tuple[str, ...]:
    """The metrics ``cfg`` asks for; UsageError (exit 2) for a value out of range."""
    chosen = METRICS if cfg.metrics is None else tuple(cfg.metrics)
    bad = [m for m in chosen if m not in METRICS]
    if bad:
        raise UsageError(f"--metrics must be among {', '.join(METRICS)}, got {', '.join(bad)}")
    twice = first_repeated(chosen)
    if twice is not None:  # an EvalConfig made in Python (parse_choices refuses it already)
        raise UsageError(f"--metrics lists {twice} twice")
    if cfg.gallery not in GALLERIES:
        raise UsageError(f"--retrieval-gallery must be one of {', '.join(GALLERIES)}, "
                           f"got {cfg.gallery}")
    for name, ks in (("--knn-k", cfg.knn_ks), ("--recall-k", cfg.recall_ks)):
        if ks is None:  # the defaults
            continue
        if not ks:  # the Python API's (the command's parser refuses it already)
            raise UsageError(f"{name} must not be empty")
        if any(k < 1 for k in ks):
            raise UsageError(f"{name} values must be >= 1, got {min(ks)}")
        twice = first_repeated(ks)
        if twice is not None:  # each k's hits would be counted once per listing
            raise UsageError(f"{name} lists {twice} twice")
    if not cfg.knn_temperature > 0:  # NaN too
        raise UsageError(f"--knn-temperature must be > 0, got {cfg.knn_temperature}")
    if cfg.max_r < 1:
        raise UsageError(f"--max-r must be >= 1, got {cfg.max_r}")
    if cfg.pair_sample < 1:
        raise UsageError(f"--pair-sample must be >= 1, got {cfg.pair_sample}")
    # the probe's fields, no option of the command (the Python API's)
    if not cfg.probe_weight_decays:
        raise UsageError("probe_weight_decays must not be empty")
    for decay in cfg.probe_weight_decays:
        if not np.isfinite(decay):
            raise UsageError(f"probe_weight_decays must be numbers, got {decay}")
        if decay < 0:  # the objective would have no minimum
            raise UsageError(f"probe_weight_decays must be >= 0, got {decay}")
    if cfg.probe_max_iter < 1:
        raise UsageError(f"probe_max_iter must be >= 1, got {cfg.probe_max_iter}")
    return chosen


IndexFactory = Callable[[np.ndarray], object]


@dataclass(frozen=True)
class SearchHook:
    """The progress of :func:`evaluate`'s kNN searches: ``on_start(queries)`` as each
    search pass begins (one per pass: against the references, among the queries), then
    ``progress(m)`` after each block of ``m`` queries, adding up to it; ``on_phase(line)``
    as each fit of the linear probe starts."""

    on_start: Callable[[int], None]
    progress: Callable[[int], None]
    on_phase: Callable[[str], None] | None = None


def evaluate(queries: EvalSide, references: EvalSide, cfg: EvalConfig,
             *, self_rows: np.ndarray | None = None,
             index_factory: IndexFactory | None = None,
             hook: SearchHook | None = None) -> EvalReport:
    """Every requested (or, by default, every computable) metric of ``queries`` against
    ``references``.

    ``index_factory``: builds the exact index a search pass uses from the vectors (n, d)
    it searches (an object with ``search(queries, k)``, like FAISS); None: the local
    index of ``cfg.device`` / ``cfg.backend``. The command line passes the Ray one
    (:func:`pairkit.distributed.search.sharded_index`) for ``--ray``. ``hook``: the
    searches' progress (:class:`SearchHook`).

    ``self_rows`` (nq,): the row of each query among the references (-1 if none), for
    when the two sides share rows. A metric that cannot be computed is left out of
    ``report.metrics`` with a note, unless it was asked for in ``cfg.metrics``: then
    PairkitError.
    """
    chosen = check_eval_config(cfg)
    explicit = cfg.metrics is not None
    report = EvalReport()
    report.metrics["n_queries"] = len(queries)
    report.metrics["n_references"] = len(references)
    if len(queries) == 0:
        raise PairkitError("no queries to evaluate (the query side is empty)")
    if queries.vectors.shape[1] != references.vectors.shape[1]:
        raise PairkitError(f"queries have dim {queries.vectors.shape[1]}, references "
                           f"{references.vectors.shape[1]}")
    rng = np.random.default_rng(cfg.seed)
    qsrc, rsrc, _ = _codes(queries.sources, references.sources, na_missing=True)

    wanted_label = [m for m in chosen if m in LABEL_METRICS]
    blocked = _label_status(queries, references, cfg)  # metric -> why it cannot run
    failing = [m for m in wanted_label if m in blocked]
    if failing:
        reasons = list(dict.fromkeys(blocked[m] for m in failing))
        if explicit:
            names = [m for m in failing if blocked[m] == reasons[0]]
            raise PairkitError(f"--metrics {','.join(names)} {reasons[0]}")
        wanted_label = [m for m in wanted_label if m not in blocked]
        for why in reasons:
            names = [m for m in failing if blocked[m] == why]
            report.notes.append(
                f"{why}: only label-free metrics (alignment, uniformity) computed"
                if not wanted_label and len(reasons) == 1 else f"{why}: {', '.join(names)} "
                "left out")

    if wanted_label:
        _label_metrics(queries, references, qsrc, rsrc, self_rows, wanted_label, cfg, rng,
                       report, index_factory, explicit=explicit, hook=hook)
    elif cfg.collect_scores and len(references):
        _mined_unlabeled(queries, references, qsrc, rsrc, self_rows, cfg, report,
                          index_factory, hook)
    if "geometry" in chosen:
        _geometry(queries, qsrc, cfg, rng, report, explicit)
    return report


def _label_status(queries: EvalSide, references: EvalSide, cfg: EvalConfig) -> dict[str, str]:
    """The label metrics that cannot run on these sides, each with why: kNN and the probe
    need 2+ classes among the references; retrieval needs them in its gallery (the
    references, or with ``cfg.gallery == "queries"`` the queries: the reference labels
    are then not looked at)."""
    if queries.labels is None:
        return dict.fromkeys(LABEL_METRICS, "need labels, the queries have none")
    blocked: dict[str, str] = {}
    ref_why = None
    if references.labels is None:
        ref_why = "need labels, the references have none"
    else:
        n_present, first = _classes_present(references.labels)
        if n_present < 2:
            ref_why = (f"need at least 2 classes on the reference side, found {n_present}"
                       + (f" ({first})" if n_present else ""))
    if ref_why is not None:
        blocked["knn"] = blocked["linear"] = ref_why
        if cfg.gallery == "reference":
            blocked["retrieval"] = ref_why
    if cfg.gallery == "queries":
        n_present, first = _classes_present(queries.labels)
        if n_present < 2:
            blocked["retrieval"] = (
                "need at least 2 classes on the query side (the retrieval gallery), found "
                f"{n_present}" + (f" ({first})" if n_present else ""))
    return blocked


def _classes_present(labels: np.ndarray | Coded) -> tuple[int, object]:
    """How many distinct labels ``labels`` has (missing ones not counted), and one of them
    (None when there is none)."""
    if isinstance(labels, Coded):
        codes = labels.present()
        return len(codes), (value_at(labels.values, codes[0]) if len(codes) else None)
    present = list(dict.fromkeys(v for v in labels if v is not None))
    return len(present), (present[0] if present else None)


def _subset_self_rows(self_rows: np.ndarray | None, q_keep: np.ndarray,
                      r_keep: np.ndarray) -> np.ndarray | None:
    if self_rows is None:
        return None
    new_pos = np.full(len(r_keep), -1, dtype=np.int64)
    new_pos[r_keep] = np.arange(int(r_keep.sum()))
    s = self_rows[q_keep]
    return np.where(s >= 0, new_pos[np.maximum(s, 0)], -1)


def _label_metrics(queries: EvalSide, references: EvalSide, qsrc: np.ndarray,
                   rsrc: np.ndarray, self_rows: np.ndarray | None, wanted: list[str],
                   cfg: EvalConfig, rng: np.random.Generator, report: EvalReport,
                   index_factory: IndexFactory | None = None, *, explicit: bool = False,
                   hook: SearchHook | None = None) -> None:
    if references.labels is None:  # retrieval among the queries only
        ql_all, _, classes = _codes(queries.labels, np.empty(0, dtype=object), na_missing=True)
        rl_all = np.full(len(references), -1, dtype=np.int64)
    else:
        ql_all, rl_all, classes = _codes(queries.labels, references.labels, na_missing=True)
    q_keep = ql_all >= 0
    r_keep = rl_all >= 0
    # the references' labels are not looked at by retrieval among the queries alone
    refs_used = "knn" in wanted or "linear" in wanted or cfg.gallery == "reference"
    if not q_keep.all() or (refs_used and not r_keep.all()):
        report.notes.append(
            f"label metrics use labelled items only: {int(q_keep.sum())} of {len(q_keep)} "
            "queries" + (f", {int(r_keep.sum())} of {len(r_keep)} references" if refs_used
                         else ""))
    qx = _rows(queries.vectors, q_keep)
    ql = _kept(ql_all, q_keep)
    qg = _kept(qsrc, q_keep)
    # classes with a reference: counted, not sorted (the references may be many)
    with_ref = np.flatnonzero(np.bincount(rl_all + 1, minlength=len(classes) + 1)[1:])
    absent = np.setdiff1d(np.unique(ql), with_ref)
    if len(absent) and ("knn" in wanted or "linear" in wanted):
        report.notes.append(
            f"{len(absent)} query class(es) have no reference (e.g. "
            f"{value_at(classes, absent[0])}): "
            "their queries count as wrong for kNN and the linear probe")
    if "knn" in wanted or "linear" in wanted:
        _imbalance_note(ql, classes, report)

    need_ref_search = ("knn" in wanted) or ("retrieval" in wanted and cfg.gallery == "reference")
    if need_ref_search:
        rx = _rows(references.vectors, r_keep)
        rl = _kept(rl_all, r_keep)
        rg = _kept(rsrc, r_keep)
        srows = _subset_self_rows(self_rows, q_keep, r_keep)
        excl = Exclusion(srows, qg if cfg.exclude_same_source else None,
                         rg if cfg.exclude_same_source else None)
        # the label metrics see the labelled references only: say so when that is fewer
        what, total = (("reference set", None) if r_keep.all()
                       else ("labelled reference set", len(r_keep)))
        ks = _ks(cfg.knn_ks, DEFAULT_KNN_KS, len(rx), "--knn-k", what, report) \
            if "knn" in wanted else ()
        rks = (_ks(cfg.recall_ks, DEFAULT_RECALL_KS, len(rx), "--recall-k", what, report)
               if ("retrieval" in wanted and cfg.gallery == "reference") else ())
        _check_k(ks, rks, len(rx), what, total)
        r_counts = relevant_counts(ql, rl, excl) if rks else None
        if r_counts is not None and not (r_counts > 0).any():
            _cannot_retrieve("no query has a relevant reference (one of its class that is "
                             "not excluded)", explicit, report)
            rks, r_counts = (), None
        if ks or rks:
            k_search = _k_search(ks, rks, r_counts, cfg.max_r, len(rx))
            index = _index(rx, cfg, index_factory)
            _search_pass(qx, ql, index, len(rx), rl, k_search, excl, ks, rks, r_counts, cfg,
                         report, hook, collect=cfg.collect_scores)
            del index
    if "retrieval" in wanted and cfg.gallery == "queries":
        # the retrieval gallery is the query side: say so beside the reference count
        report.metrics["n_gallery"] = len(queries)
        excl = Exclusion(np.arange(len(qx)), qg if cfg.exclude_same_source else None,
                         qg if cfg.exclude_same_source else None)
        what = "query set (less the query itself)"
        rks = _ks(cfg.recall_ks, DEFAULT_RECALL_KS, len(qx) - 1, "--recall-k", what, report)
        _check_k((), rks, len(qx) - 1, what)
        r_counts = relevant_counts(ql, ql, excl)
        if not (r_counts > 0).any():
            _cannot_retrieve("no query has a relevant other query (one of its class that is "
                             "not excluded) in the gallery of queries", explicit, report)
        else:
            k_search = _k_search((), rks, r_counts, cfg.max_r, len(qx))
            index = _index(qx, cfg, index_factory)
            _search_pass(qx, ql, index, len(qx), ql, k_search, excl, (), rks, r_counts,
                         cfg, report, hook)
    if "linear" in wanted:
        _probe(queries, references, ql_all, rl_all, q_keep, r_keep, rsrc, cfg, rng, report,
               explicit, None if hook is None else hook.on_phase)


# query classes whose sizes differ this much get a note: top-1 is then mostly the large
# classes' (a long-tailed held-out split), the mean per-class recalls are not
IMBALANCE_NOTE_RATIO = 3.0


def _imbalance_note(ql: np.ndarray, classes: Any, report: EvalReport) -> None:
    """Say so when the query classes (codes ``ql``) differ >= :data:`IMBALANCE_NOTE_RATIO`
    x in size, naming the largest and the smallest."""
    counts = np.bincount(ql)
    present = np.flatnonzero(counts)
    if len(present) < 2:
        return
    big = present[np.argmax(counts[present])]
    small = present[np.argmin(counts[present])]
    if counts[big] < IMBALANCE_NOTE_RATIO * counts[small]:
        return
    report.notes.append(
        f"query classes differ {counts[big] / counts[small]:.0f}x in size ({counts[big]} "
        f"{value_at(classes, big)}, {counts[small]} {value_at(classes, small)}): top-1 "
        "is mostly the large classes'; the mean per-class recalls weigh every class the same")


def _rows(x: Any, keep: np.ndarray) -> Any:
    """The rows ``keep`` (a mask) of ``x``: an array, or a view for rows read on demand
    (:class:`~pairkit.core.row_view.RowView`: nothing read now); ``x`` itself when all."""
    from pairkit.core.row_view import is_view

    if keep.all():
        return x
    return x.subset(keep) if is_view(x) else x[keep]


def _index(x: Any, cfg: EvalConfig, factory: IndexFactory | None = None) -> object:
    """Exact index over ``x``: ``factory(x)`` when given (``x`` may be rows read on
    demand, the workers' to read), else the exact search of ``cfg.backend`` on
    ``cfg.device`` (:func:`pairkit.index.open.open_searcher`)."""
    if factory is not None:
        return factory(x)
    x = np.asarray(x)
    from pairkit.index.open import open_searcher
    from pairkit.index.options import IndexOptions

    return open_searcher(x, IndexOptions(kind="flat", backend=cfg.backend,
                                         device=cfg.device)).index


def _ks(given: tuple[int, ...] | None, default: tuple[int, ...], n: int, name: str,
        what: str, report: EvalReport) -> tuple[int, ...]:
    """The k values of a metric: those given (checked by :func:`_check_k`), else
    ``default`` with each k capped at the ``n`` items of the set searched, said in a note
    (a small store's evaluation is not refused for a k nobody asked for)."""
    if n < 1:  # (the label checks leave 2+ items to search; the Python API's guard)
        raise PairkitError(f"{name}: the {what} is empty")
    if given is not None:
        return given
    if max(default) <= n:
        return default
    capped = tuple(dict.fromkeys(min(k, n) for k in default))
    big = ", ".join(str(k) for k in default if k > n)
    report.notes.append(f"{name} {', '.join(map(str, capped))}: the default {big} capped at "
                        f"the {what}'s {n} items")
    return capped


def _k_search(ks: tuple[int, ...], rks: tuple[int, ...], r_counts: np.ndarray | None,
              max_r: int, n: int) -> int:
    """Neighbours one search pass needs: the largest k asked for, or the most relevant
    items of a query (R, at most ``max_r``) for R-precision and MAP@R; at most the ``n``
    items searched."""
    k = max([*ks, *rks, 1])
    if r_counts is not None:
        k = max(k, min(int(r_counts.max(initial=0)), max_r))
    return min(k, n)


def _check_k(ks: tuple[int, ...], rks: tuple[int, ...], n: int, what: str,
             total: int | None = None) -> None:
    """PairkitError for a k larger than the ``n`` items searched (``total``: the items
    the set was taken from, when fewer were kept: the labelled references)."""
    size = f"{n} items" if total is None else f"{n} items, of {total} references"
    if ks and max(ks) > n:
        raise PairkitError(f"--knn-k {max(ks)} is larger than the {what} ({size})")
    if rks and max(rks) > n:
        raise PairkitError(f"--recall-k {max(rks)} is larger than the {what} ({size})")


def _cannot_retrieve(why: str, explicit: bool, report: EvalReport) -> None:
    """Retrieval has no query to score: an error when ``--metrics`` lists it, else a note."""
    if explicit:
        raise PairkitError(f"--metrics retrieval: {why}")
    report.notes.append(f"retrieval: {why}: left out")


def _search_pass(qx: np.ndarray, ql: np.ndarray, index: object, n_ref: int,
                 rl: np.ndarray, k_search: int, excl: Exclusion, ks: tuple[int, ...],
                 rks: tuple[int, ...], r_counts: np.ndarray | None, cfg: EvalConfig,
                 report: EvalReport, hook: SearchHook | None = None, *,
                 collect: bool = False) -> None:
    """One search pass of ``qx`` (labels ``ql``) against ``index`` (``n_ref`` rows, labels
    ``rl``): kNN and retrieval metrics into ``report``; with ``collect`` (the pass against
    the references) also each query's hardest negative, its nearest reference of another
    class (:func:`_hardest_other_class`)."""
    knn_top1 = dict.fromkeys(ks, 0)
    knn_top5 = dict.fromkeys(ks, 0)
    # top-1 hits and queries per query class (the class-balanced figure of a long tail)
    n_classes = int(ql.max(initial=-1)) + 1
    class_hits = {k: np.zeros(n_classes, dtype=np.int64) for k in ks}
    sums = {"precision_at_1": 0.0, "r_precision": 0.0, "map_at_r": 0.0}
    recall = dict.fromkeys(rks, 0)
    n_valid = n_capped = 0
    # each query's nearest other-class reference among its fetched neighbours (NaN: none)
    hardest = np.full(len(qx), np.nan, dtype=np.float32) if collect else None
    if hook is not None:
        hook.on_start(len(qx))
    for start, scores, ids in search_excluding(qx, index, n_ref, k_search, excl,
                                               block_rows=cfg.block_rows):
        # row by row, some rows at a time: the (b, K) labels and retrieval temporaries
        # of a large --max-r never whole (per-query values, summed per block as before)
        parts: dict[str, list[np.ndarray]] = {key: [] for key in sums}
        for rows in row_chunks(len(ids), ids.shape[1] * SCORE_BYTES):
            at = slice(start + rows.start, start + rows.stop)
            labels = rl[np.maximum(ids[rows], 0)]
            labels[ids[rows] < 0] = -1
            true = ql[at]
            for k in ks:
                ranked, _ = knn_rank_classes(labels, scores[rows], k, cfg.knn_temperature)
                h1, h5 = knn_hits(ranked, true)
                knn_top1[k] += int(h1.sum())
                knn_top5[k] += int(h5.sum())
                class_hits[k] += np.bincount(true[h1], minlength=n_classes)
            if rks and r_counts is not None:
                out = retrieval_scores(labels, true, r_counts[at], rks, cfg.max_r)
                v = out["valid"]
                n_valid += int(v.sum())
                n_capped += int(out["capped"].sum())
                for key in sums:
                    parts[key].append(out[key][v])
                for k in rks:
                    recall[k] += int(out[f"recall_at_{k}"][v].sum())
            if hardest is not None:
                neg = (labels != true[:, None]) & (ids[rows] >= 0)
                first = np.argmax(neg, axis=1)
                has = neg[np.arange(len(neg)), first]
                hardest[at][has] = scores[rows][np.arange(len(neg)), first][has]
        for key, values in parts.items():
            if values:
                sums[key] += float(np.concatenate(values).sum())
        if hook is not None:
            hook.progress(len(ids))
        del scores, ids  # not held while the next block is searched
    nq = len(qx)
    if ks:
        queries_of = np.bincount(ql, minlength=n_classes)
        per_class = {k: class_recall(class_hits[k], queries_of) for k in ks}
        report.metrics["knn"] = {str(k): {"top1": knn_top1[k] / nq, "top5": knn_top5[k] / nq,
                                          "mean_per_class_recall": per_class[k]}
                                 for k in ks}
        report.metrics["knn_top1"] = knn_top1[ks[0]] / nq
        report.metrics["knn_top5"] = knn_top5[ks[0]] / nq
        report.metrics["knn_mean_per_class_recall"] = per_class[ks[0]]
    if rks:
        if n_valid == 0:
            report.notes.append("retrieval: no query has a relevant reference")
        else:
            for key, total in sums.items():
                report.metrics[key] = total / n_valid
            report.metrics["recall_at_k"] = {str(k): recall[k] / n_valid for k in rks}
        left = nq - n_valid
        if left:
            report.notes.append(f"retrieval: {left} queries without a relevant reference left out")
        if n_capped:
            report.notes.append(f"retrieval: R > --max-r {cfg.max_r} for {n_capped} queries: "
                                "R-precision and MAP@R are lower bounds (raise --max-r)")
        report.details["retrieval_queries"] = n_valid
        report.details["retrieval_capped"] = n_capped
    if hardest is not None:
        _hardest_other_class(qx, ql, index, n_ref, rl, k_search, excl, cfg, hardest)
        report.scores["mined_negative"] = hardest[np.isfinite(hardest)].astype(np.float64)


# the deeper searches of _hardest_other_class hold at most this many neighbours a block
DEEPEN_NEIGHBOURS = 1 << 22


def _hardest_other_class(qx: np.ndarray, ql: np.ndarray, index: object, n_ref: int,
                         rl: np.ndarray, k_fetched: int, excl: Exclusion, cfg: EvalConfig,
                         hardest: np.ndarray) -> None:
    """Fill in ``hardest`` (nq,) where it is NaN: the score of the query's nearest
    reference of another class (excluded rows left out), searched deeper, twice as deep
    each round, for the queries whose first ``k_fetched`` neighbours are all of their
    own class; NaN stays where no reference of another class is left."""
    other = np.bincount(rl, minlength=int(ql.max(initial=-1)) + 1)
    has_other = (len(rl) - other[ql]) > 0  # some reference of another class exists
    todo = np.flatnonzero(np.isnan(hardest) & has_other)
    k = k_fetched
    while len(todo) and k < n_ref:
        k = min(2 * max(k, 1), n_ref)
        block = max(1, min(cfg.block_rows,
                           DEEPEN_NEIGHBOURS // (k + excl.max_excluded())))
        for lo in range(0, len(todo), block):  # the queries read a block at a time
            rows = todo[lo : lo + block]
            sub = Exclusion(None if excl.self_rows is None else excl.self_rows[rows],
                            None if excl.query_groups is None else excl.query_groups[rows],
                            excl.ref_groups)
            for _, scores, ids in search_excluding(np.asarray(qx[rows]), index, n_ref, k,
                                                   sub, block_rows=block):
                labels = rl[np.maximum(ids, 0)]
                neg = (labels != ql[rows][:, None]) & (ids >= 0)
                first = np.argmax(neg, axis=1)
                has = neg[np.arange(len(neg)), first]
                hardest[rows[has]] = scores[np.arange(len(neg)), first][has]
        todo = todo[np.isnan(hardest[todo])]


def _mined_unlabeled(queries: EvalSide, references: EvalSide, qsrc: np.ndarray,
                      rsrc: np.ndarray, self_rows: np.ndarray | None, cfg: EvalConfig,
                      report: EvalReport, index_factory: IndexFactory | None = None,
                      hook: SearchHook | None = None) -> None:
    """Without labels the hardest negative is the nearest reference of another source."""
    excl = Exclusion(self_rows, qsrc, rsrc)
    rx = references.vectors
    index = _index(rx, cfg, index_factory)
    out = []
    if hook is not None:
        hook.on_start(len(queries.vectors))
    for _, scores, _ids in search_excluding(queries.vectors, index, len(rx), 1, excl,
                                            block_rows=cfg.block_rows):
        out.append(scores[:, 0][np.isfinite(scores[:, 0])])
        if hook is not None:
            hook.progress(len(scores))
    report.scores["mined_negative"] = np.concatenate(out).astype(np.float64)


def _probe(queries: EvalSide, references: EvalSide, ql_all: np.ndarray, rl_all: np.ndarray,
           q_keep: np.ndarray, r_keep: np.ndarray, rsrc: np.ndarray, cfg: EvalConfig,
           rng: np.random.Generator, report: EvalReport, explicit: bool = False,
           on_phase: Callable[[str], None] | None = None) -> None:
    """The linear probe, on at most ``cfg.probe_max_train`` random references. A draw
    that leaves fewer than 2 classes is refused when the probe was asked for
    (``explicit``), else the probe is left out, said. ``on_phase``: a line per fit."""
    from pairkit.core.devices import resolve_device
    from pairkit.eval.linear_probe import linear_probe

    train_rows = np.flatnonzero(r_keep)
    if len(train_rows) > cfg.probe_max_train:
        train_rows = np.sort(rng.choice(train_rows, size=cfg.probe_max_train, replace=False))
        n_classes = len(np.unique(rl_all[train_rows][rl_all[train_rows] >= 0]))
        if n_classes < 2:
            why = (f"--probe-max-train {cfg.probe_max_train} leaves {n_classes} class"
                   f"{'' if n_classes == 1 else 'es'} among the references the probe trains "
                   "on; it needs 2 or more")
            if explicit:
                raise PairkitError(f"--metrics linear: {why}: raise --probe-max-train")
            report.notes.append(f"{why}: linear probe left out")
            return
        report.notes.append(f"linear probe trained on a random {cfg.probe_max_train} of "
                            f"{int(r_keep.sum())} references (--probe-max-train)")
    # the queries as they are (rows read on demand stay so: predicted a block at a time)
    res = linear_probe(
        np.asarray(references.vectors[train_rows], dtype=np.float32), rl_all[train_rows],
        rsrc[train_rows], _rows(queries.vectors, q_keep), ql_all[q_keep],
        weight_decays=cfg.probe_weight_decays, seed=cfg.seed,
        device=resolve_device(cfg.device), max_iter=cfg.probe_max_iter,
        balanced=cfg.probe_balanced,
        test_block=cfg.block_rows, on_fit=on_phase)
    report.metrics["linear_top1"] = res.top1
    report.metrics["linear_mean_per_class_recall"] = res.mean_per_class_recall
    # how the probe was fitted, in the JSON beside its figures
    report.metrics["linear_probe"] = {"weight_decay": res.weight_decay,
                                      "balanced": cfg.probe_balanced,
                                      "validated": not res.unvalidated}
    if res.unvalidated:
        report.notes.append(f"linear probe: no validation split ({res.unvalidated}): weight "
                            f"decay {res.weight_decay:g}, the first of the list, not chosen")


def _geometry(queries: EvalSide, qsrc: np.ndarray, cfg: EvalConfig,
              rng: np.random.Generator, report: EvalReport, explicit: bool) -> None:
    from pairkit.core.row_view import is_view

    x = queries.vectors
    pi, pj = positive_pairs(qsrc, cfg.pair_sample, rng)
    ui, uj = random_pairs(len(x), cfg.pair_sample, rng)
    if is_view(x):  # rows read on demand: the sampled ones, in one read
        x = x.gather(np.concatenate([pi, pj, ui, uj]))
    if len(pi):
        report.metrics["alignment"] = alignment(x, pi, pj)
        if cfg.collect_scores:
            report.scores["positive"] = pair_dots(x, pi, pj)
    else:
        msg = "alignment needs 2+ views of a source (embed with --views 2)"
        if explicit:
            raise PairkitError(f"--metrics geometry: {msg}")
        report.notes.append(msg)
    if len(ui):
        report.metrics["uniformity"] = uniformity(x, ui, uj)
        if cfg.collect_scores:
            other = qsrc[ui] != qsrc[uj]
            report.scores["random_negative"] = pair_dots(x, ui[other], uj[other])
