"""The pairs of one training run: examples from the pair table or the relation, the
validation split by source, what identifies them in the head's fingerprint, and each
epoch's shuffled (and positive-swapped) examples."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.unique import sorted_unique
from pairkit.errors import PairkitError
from pairkit.eval.split import split_by_source
from pairkit.train.data import (
    PairArrays,
    TableInfo,
    pairs_from_table,
    relation_groups,
    restrict,
    sample_relation_pairs,
    table_kind,
)
from pairkit.train.positives import (
    PositiveSets,
    SourceRows,
    concat_pairs,
    mined_only_examples,
    positive_sets,
    source_rows,
    split_mined_rows,
    swap_positives,
)
from pairkit.train.train_negatives import (
    check_train_negatives,
    has_in_batch_negative,
    has_mined_negative,
)

if TYPE_CHECKING:
    import pandas as pd

    from pairkit.core.store import Store
    from pairkit.train.config import TrainConfig


@dataclass(frozen=True)
class RunPairs:
    """The examples of a run. ``train`` is None when they are drawn from the relation
    afresh each epoch; ``examples`` is how many an epoch has."""

    groups: np.ndarray  # (n,) positive-group code of each store row
    val_mask: np.ndarray  # (n,) bool: rows of the validation sources
    train: PairArrays | None
    val: PairArrays
    mined: PositiveSets | None
    pairs_id: dict[str, Any]
    examples: int
    views: SourceRows | None = None  # rows by source, to draw a mined positive's view
    # sorted keys group(a) * n_groups + group(x) of the items x known to be no negative of
    # a's group (its mined positives, its flagged false negatives): pairkit.train.exclusions
    excluded: np.ndarray | None = None


def table_digest(df: pd.DataFrame) -> str:
    """A short content hash of a table (identifies the pairs a head was trained on)."""
    import pandas as pd

    h = pd.util.hash_pandas_object(df, index=False).to_numpy()
    return hashlib.sha256(h.tobytes() + ",".join(map(str, df.columns)).encode()).hexdigest()[:16]


def read_pairs(table: pd.DataFrame, store: Store, cfg: TrainConfig, allowed: np.ndarray
               ) -> tuple[PairArrays, TableInfo, PositiveSets | None]:
    """The examples of a pair table, what was read, and its mined positives (or None).

    Items with mined positives but no example row of their own (a one-view store) get
    an example whose positive is mined."""
    view_rows, mined_rows = split_mined_rows(table)
    sets = None
    if mined_rows is None:
        pairs, info = pairs_from_table(table, store.count, store.content_id, cfg.fn_mode)
    else:
        if len(view_rows):
            pairs, info = pairs_from_table(view_rows, store.count, store.content_id,
                                           cfg.fn_mode)
        else:
            pairs_from_table(mined_rows, store.count, store.content_id, "keep")  # checks ids
            pairs = PairArrays(*(np.zeros(0, np.int64),) * 2, np.zeros((0, 0), np.int64),
                               np.zeros((0, 0), bool))
            info = TableInfo(kind=table_kind(table), rows=0, flagged=0, notes=())
        sets = positive_sets(mined_rows, store.count, allowed)
        if cfg.positive_share == 0:  # 0 ignores them: no example of them, no whitening pair
            sets = None
            if not len(pairs):
                raise PairkitError("--positive-share 0 ignores the mined positives, and the "
                                   "table holds no other rows")
        else:
            extra = mined_only_examples(sets, sorted_unique(pairs.anchor), allowed)
            if len(extra):
                pairs = concat_pairs(pairs, extra)
        info = TableInfo(kind=info.kind, rows=len(table), flagged=info.flagged,
                         notes=info.notes, flagged_pairs=info.flagged_pairs)
    check_paths(table, store)  # after the ids' checks, which name what is wrong first
    return pairs, info, sets


def check_paths(table: pd.DataFrame, store: Store) -> None:
    """PairkitError unless the paths of a sample of the table's rows are the store's for
    their ids (:func:`pairkit.core.table_items.table_mismatch`): one set of vectors
    imported with two item tables gives two stores of one content id."""
    from pairkit.core.table_items import table_mismatch

    why = table_mismatch(table, table_kind(table), store)
    if why is not None:
        raise PairkitError(f"pair table: {why}: the table doesn't fit this store (mine on it)")


def run_pairs(store: Store, cfg: TrainConfig, table: pd.DataFrame | None,
              table_name: str | None, note: Callable[[str], None]) -> RunPairs:
    """The run's examples from ``table`` (else ``cfg.relation``), split by source into
    training and validation; the table's notes go to ``note``. Raises PairkitError when
    too few pairs are left on either side."""
    sources = store.source_codes()
    relation = cfg.relation or "instance"
    labels = store.labels() if relation == "label" else None
    groups = relation_groups(sources, labels, relation)
    if table is None and labels is not None:
        from pairkit.core.store import codes_of

        unlabelled = int((codes_of(labels)[0] < 0).sum())
        if unlabelled:
            note(f"--relation label: {unlabelled} of {len(labels)} items have no label and are "
                 "left out (a positive is another item of the same label)")
    val_mask = split_by_source(sources, cfg.val_fraction, cfg.seed, option="--val-fraction",
                               allow_zero=True)
    check_val_groups(groups, sources, val_mask, cfg, relation)
    mined: PositiveSets | None = None
    if table is not None:
        all_pairs, info, mined = read_pairs(table, store, cfg, ~val_mask)
        for n in info.notes:
            note(n)
        train_pairs: PairArrays | None = restrict(all_pairs, ~val_mask)
        val_pairs = restrict(all_pairs, val_mask)
        pairs_id: dict[str, Any] = {"table": table_name, "kind": info.kind, "rows": info.rows,
                                    "digest": table_digest(table), "flagged": info.flagged,
                                    "mined_positives": 0 if mined is None else mined.total}
        if len(train_pairs) == 0:
            raise PairkitError("no training pairs left outside the validation sources: lower "
                               "--val-fraction")
    else:
        train_pairs = None
        val_pairs = sample_relation_pairs(groups, val_mask,
                                          np.random.default_rng([cfg.seed, 104729]))
        pairs_id = {"relation": relation}
    if table is None:
        probe = sample_relation_pairs(groups, ~val_mask, np.random.default_rng(0))
        if len(probe) < 2:
            need = ("instance needs 2+ views per source: embed --views 2; or use --relation "
                    "label" if relation == "instance" else "label needs 2+ items of a label: "
                    "embed with --labels; or use --relation instance")
            raise PairkitError(f"--relation {relation}: fewer than 2 items have a positive in "
                               f"the store ({need} or a pair table)")
        n_examples = len(probe)
    else:
        assert train_pairs is not None
        n_examples = len(train_pairs)
    if cfg.val_fraction > 0 and len(val_pairs) < 2:
        raise PairkitError("--val-fraction leaves fewer than 2 validation pairs: raise it")
    views = (source_rows(sources) if mined is not None and mined.total
             and cfg.mined_view == "random" else None)
    excluded = None
    if table is not None:
        from pairkit.train.exclusions import excluded_keys

        excluded = excluded_keys(groups, mined, info.flagged_pairs)
    check_val_negatives(val_pairs, groups, excluded, sources, val_mask, cfg, relation)
    check_train_negatives(probe if train_pairs is None else train_pairs, groups, excluded,
                          mined, cfg, relation, table is not None)
    return RunPairs(groups=groups, val_mask=val_mask, train=train_pairs, val=val_pairs,
                    mined=mined, pairs_id=pairs_id, examples=n_examples, views=views,
                    excluded=excluded)


def check_val_groups(groups: np.ndarray, sources: np.ndarray, val_mask: np.ndarray,
                     cfg: TrainConfig, relation: str) -> None:
    """PairkitError when the validation sources hold fewer than 2 positive groups (one
    source, under ``instance``): their pairs have no negative (no gap, a loss of 0) and the
    uniformity of a source's near-identical views reads as collapse."""
    if not val_mask.any():
        return
    n_groups = len(np.unique(groups[val_mask]))
    if n_groups >= 2:
        return
    n_sources = len(np.unique(sources[val_mask]))
    raise PairkitError(
        f"--val-fraction {cfg.val_fraction:g} holds out {n_sources} source"
        f"{'' if n_sources == 1 else 's'} ({n_groups} {relation} group): validation needs "
        "2 or more, else its pairs have no negative and the uniformity of one thing's views "
        "reads as collapse: raise it")


def check_val_negatives(val: PairArrays, groups: np.ndarray, excluded: np.ndarray | None,
                        sources: np.ndarray, val_mask: np.ndarray, cfg: TrainConfig,
                        relation: str) -> None:
    """PairkitError when no validation pair can have a negative, though the validation
    sources hold 2 or more groups (:func:`check_val_groups`): held-out items without a
    positive there (under ``label``, a label's only item or an unlabelled one) form
    groups of no pair, and a loss of 0 and no gap would be reported each epoch."""
    if not val_mask.any() or has_mined_negative(val) or has_in_batch_negative(
            val, groups, excluded, None, False):
        return
    n_sources = len(np.unique(sources[val_mask]))
    g = len(np.unique(groups[np.concatenate([val.anchor, val.positive])]))
    raise PairkitError(
        f"--val-fraction {cfg.val_fraction:g} holds out {n_sources} source"
        f"{'' if n_sources == 1 else 's'} whose validation pairs have no negative ({g} "
        f"{relation} group{'' if g == 1 else 's'} with pairs): validation needs 2 or more, "
        "else its loss is 0 and its gap undefined: raise it")


def epoch_pairs(pairs: RunPairs, cfg: TrainConfig, epoch: int) -> PairArrays:
    """The examples of 0-based ``epoch`` in training order: drawn from the relation (or
    the table's), shuffled, a share of positives swapped for mined ones (each a view of
    its source drawn anew with ``--mined-view random``); seeded by
    ``[cfg.seed, epoch]`` so a resumed run sees the same epochs."""
    rng = np.random.default_rng([cfg.seed, epoch])
    if pairs.train is None:
        drawn = sample_relation_pairs(pairs.groups, ~pairs.val_mask, rng)
    else:
        drawn = pairs.train
    drawn = drawn.subset(rng.permutation(len(drawn)))
    if pairs.mined is not None:
        drawn = swap_positives(drawn, pairs.mined, cfg.positive_share, rng,
                               cfg.positive_sampling, pairs.views)
    return drawn
