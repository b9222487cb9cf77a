"""A block of anchors mined into its own part of the pair table, where it runs.

With ``mine --ray`` and a parquet output (a file or ``-o DIR/``), each worker mines its
block (:func:`pairkit.mine.blocks.mine_block`, the positives scored there too), builds the
block's rows by the local path's call (:func:`pairkit.core.pairs.build_pair_table`),
writes them as ``part-NNNNN.parquet`` (NNNNN: the block's number) into the run's parts
folder, the keys of its scores (``pos_score`` per anchor, ``neg_score`` per negative)
beside it for the exact quantiles (:mod:`pairkit.mine.stream_quantiles`), and returns
only a :class:`BlockSummary` (a few kB): the counts behind the summary.
:class:`SummaryCounts` adds the blocks up into the dict
:func:`pairkit.mine.stats.summary_stats` gives for the whole run. The driver's side:
:mod:`pairkit.mine.parts_run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.core.remote_parts import RemoteParts
from pairkit.core.store_rows import StoreRows
from pairkit.mine.blocks import MineBlocks, MineResult, add_counts, mine_block
from pairkit.mine.mined_parts import MinedFiles
from pairkit.mine.positives import MinedPositives
from pairkit.mine.stats import (
    QUANTILES,
    RANK_BINS,
    label_record,
    label_share,
    rank_record,
    run_record,
    same_label_counts,
)


@dataclass(frozen=True)
class PartsPlan:
    """Where and how the blocks write their parts: ``folder`` (absolute, seen by every
    node), the table ``fmt``, the store id of every row, and whether the store has
    labels (the share of negatives sharing their anchor's label is counted)."""

    folder: str
    fmt: str
    store_id: str
    labels: bool
    flags: bool = False  # the false_negative / fn_reason columns (--fn-mode keep)
    # an output on object storage (``-o s3://bucket/pairs/``): the parts and the keys
    # are put straight there under the writer's token (``folder``: its URL)
    remote: RemoteParts | None = None


@dataclass
class PartsJob:
    """What every block needs: the run's blocks (without the vectors, unless the rules'
    context needs them: :mod:`pairkit.mine.rules_plan`), the plan, and the mined
    positives: every anchor's, or where each block's lie (:mod:`pairkit.mine.mined_parts`;
    None: none mined)."""

    blocks: MineBlocks
    plan: PartsPlan
    mined: MinedPositives | MinedFiles | None = None


@dataclass
class BlockSummary:
    """What a block sends back instead of its rows (see the module docstring)."""

    rows: int
    per_anchor: np.ndarray  # (K + 1,) anchors with 0 .. K negatives
    pos_keys: tuple[str, np.ndarray, int]  # the pos_score of each anchor, and
    neg_keys: tuple[str, np.ndarray, int]  # of each negative: (keys file, buckets, NaNs)
    rank_counts: np.ndarray  # (len(RANK_BINS),) negatives per rank bin, the last open
    rank_max: int  # the largest rank (-1: none)
    removed: dict[str, int]
    fn_flagged: dict[str, int]
    retries: int
    anchors_retried: int
    k_max: int
    same_label: tuple[int, int] | None  # (negatives sharing the label, both labelled)
    attracted: int = 0  # flagged candidates attracted as extra positives (--fn-mode attract)
    part: dict[str, Any] | None = None  # the part's record, put on object storage
    seconds: dict[str, float] = field(default_factory=dict)  # index, search: this block's


COLUMNS: dict[str, tuple[Any, np.ndarray | None]] = {}  # content id -> paths, codes


def store_columns(rows: StoreRows) -> tuple[Any, np.ndarray | None]:
    """The store's paths (a :class:`pairkit.core.pairs.StringColumn`, for every block's
    table) and label codes (:func:`pairkit.core.store.codes_of`, -1: none; None:
    unlabelled), read once per process from the item table's two columns (not the whole
    table: 8M paths as Python strings would take about 0.5 GB)."""
    if rows.content_id not in COLUMNS:
        path, codes = read_columns(rows.open(verify=False))
        keep_columns(rows.content_id, path, codes)
    return COLUMNS[rows.content_id]


def read_columns(st: Any) -> tuple[Any, np.ndarray | None]:
    """``(paths as a pyarrow array, label codes or None)`` of the store ``st``
    (:func:`store_columns`)."""
    from pairkit.core.store import codes_of

    path, label = st.item_columns("path", "label")
    codes = None
    if len(label) and label.null_count < len(label):
        codes = codes_of(label.to_pandas())[0]
    return path, codes


def keep_columns(content_id: str, path: Any, codes: np.ndarray | None) -> None:
    """Keep the columns :func:`read_columns` gave (read elsewhere: a child process) as
    :func:`store_columns`' for the store ``content_id``."""
    from pairkit.core.pairs import StringColumn

    COLUMNS.clear()
    COLUMNS[content_id] = (StringColumn.of_arrow(path), codes)


def forget_columns() -> None:
    """Drop what :func:`store_columns` keeps (a run done with the store in this process)."""
    COLUMNS.clear()


def part_name(number: int) -> str:
    """The file of block ``number`` in the parts folder (the dataset's part name)."""
    from pairkit.core.tables import PART_PATTERN

    return PART_PATTERN.format(number)


def mine_block_part(job: PartsJob, span: tuple[int, int]) -> BlockSummary:
    """Mine the anchors ``span``, write their rows as the block's part, return its
    summary. A block mined again (its worker died) writes the same part again: the
    part is replaced atomically and the driver counts each block's summary once."""
    from pairkit.core.atomic import atomic_path
    from pairkit.core.pairs import build_pair_table
    from pairkit.mine.mined_parts import block_mined

    st = job.blocks
    clock = getattr(st.searcher, "seconds", None)  # the index's and the search's seconds
    before = clock() if clock is not None else {}
    part = mine_block(st, span)
    spent = {k: v - before.get(k, 0.0) for k, v in clock().items()} if clock else {}
    assert st.rows_from is not None
    paths, labels = store_columns(st.rows_from)
    table = build_pair_table(part.pairs, job.plan.fmt, job.plan.store_id, paths,
                             flag_columns=job.plan.flags)
    mined = block_mined(job.mined, span)
    if mined is not None:  # the block's anchors' mined positives, grouped by anchor
        from pairkit.mine.rules_run import with_mined_positives

        table = with_mined_positives(table, job.plan.fmt, st.anchors, mined, span,
                                     job.plan.store_id, paths)
    number = span[0] // st.ctx.cfg.batch_size
    remote, record = job.plan.remote, None
    if remote is not None:  # put whole, under the writer's token
        from pairkit.core.remote_tables import frame_bytes

        record = remote.put_part(number, frame_bytes(table, "parquet"), len(table))
    else:
        with atomic_path(Path(job.plan.folder) / part_name(number)) as tmp:
            table.to_parquet(tmp, index=False)
    summary = summarize(part, len(table), labels if job.plan.labels else None,
                        st.ctx.cfg.num_negatives, st.ctx.cfg.hard, job.plan.folder, number,
                        remote.token if remote is not None else "")
    summary.part = record
    summary.seconds = spent
    return summary


def summarize(part: MineResult, rows: int, labels: np.ndarray | None, K: int,
              hard: bool, folder: str | Path, number: int, token: str = "") -> BlockSummary:
    """The :class:`BlockSummary` of block ``number``'s result (``rows``: its table's rows;
    ``labels``: the store's label codes or None); its scores' keys are written into
    ``folder`` (:func:`pairkit.mine.stream_quantiles.write_keys`), so that the summary
    stays small (Ray returns it inline, not through the object store)."""
    from pairkit.mine.stream_quantiles import keys_path

    p = part.pairs
    ok = p.neg_ids >= 0
    per = ok.sum(axis=1)
    ranks = p.neg_ranks[ok] if hard else np.zeros(0, np.int64)
    bins = np.searchsorted(np.asarray(RANK_BINS), ranks, side="right") - 1
    same = None if labels is None else same_label_counts(p, labels)
    return BlockSummary(
        rows=rows, per_anchor=np.bincount(per, minlength=K + 1).astype(np.int64),
        pos_keys=scores_file(p.pos_scores, keys_path(folder, "pos", number, token)),
        neg_keys=scores_file(p.neg_scores[ok], keys_path(folder, "neg", number, token)),
        rank_counts=np.bincount(bins, minlength=len(RANK_BINS)).astype(np.int64),
        rank_max=int(ranks.max()) if len(ranks) else -1,
        removed=dict(part.removed), fn_flagged=dict(part.fn_flagged), retries=part.retries,
        anchors_retried=part.anchors_retried, k_max=part.k_max, same_label=same,
        attracted=0 if p.fn_ids is None else len(p.fn_ids))


def scores_file(values: np.ndarray, path: Path | str) -> tuple[str, np.ndarray, int]:
    """``(path, buckets, NaNs)``: ``values``' keys written to ``path``
    (:func:`pairkit.mine.stream_quantiles.write_keys`)."""
    from pairkit.mine.stream_quantiles import write_keys

    buckets, nans = write_keys(values, path)
    return str(path), buckets, nans


@dataclass
class SummaryCounts:
    """The blocks' summaries added up (:meth:`add`, in block order); :meth:`stats` the
    dict of :func:`pairkit.mine.stats.summary_stats` for the whole run. ``pos`` and
    ``neg`` hold the exact quantiles' spill files."""

    K: int
    hard: bool
    k0: int
    pos: Any
    neg: Any
    rows: int = 0
    per_anchor: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rank_counts: np.ndarray = field(default_factory=lambda: np.zeros(len(RANK_BINS),
                                                                      np.int64))
    rank_max: int = -1
    removed: dict[str, int] = field(default_factory=dict)
    fn_flagged: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    anchors_retried: int = 0
    k_max: int = 0
    same: int = 0
    both: int = 0
    attracted: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # the blocks' added up

    def __post_init__(self) -> None:
        self.per_anchor = np.zeros(self.K + 1, np.int64)
        self.k_max = self.k0

    def add(self, s: BlockSummary) -> None:
        self.rows += s.rows
        self.per_anchor += s.per_anchor
        self.rank_counts += s.rank_counts
        self.rank_max = max(self.rank_max, s.rank_max)
        self.attracted += s.attracted
        for key, value in s.seconds.items():
            self.seconds[key] = self.seconds.get(key, 0.0) + value
        add_counts(self, s)
        if s.same_label is not None:
            self.same += s.same_label[0]
            self.both += s.same_label[1]
        self.pos.add_file(*s.pos_keys)
        self.neg.add_file(*s.neg_keys)

    def negatives_same_label(self) -> float | None:
        """:func:`pairkit.mine.stats.same_label_share` of the whole run."""
        return label_share(self.same, self.both)

    def label_record(self) -> dict[str, Any]:
        """:func:`pairkit.mine.stats.same_label_record` of the whole run."""
        return label_record(self.same, self.both)

    def stats(self) -> dict[str, Any]:
        """The dict :func:`pairkit.mine.stats.summary_stats` gives for the whole run."""
        stats = run_record(self.per_anchor, self.K, self.pos.quantiles(QUANTILES),
                           self.neg.quantiles(QUANTILES), self, self.attracted, self.k0)
        if self.hard:
            stats["rank_histogram"] = rank_record(self.rank_counts, self.rank_max)
        return stats
