"""Scores in pair tables are cosines: a float16 store's rows, normalised to ~1e-3, can
give a product above 1, which mine writes clipped as search and dedup do."""

from __future__ import annotations

import numpy as np
import pandas as pd

import pairkit
from pairkit.core.store_writer import write_store


def copies_store(path):
    rng = np.random.default_rng(3)
    base = rng.normal(size=(12, 64)).astype(np.float32)
    rows = np.concatenate([base, base])  # an exact copy of each source, of another label
    items = pd.DataFrame({"path": [f"p{i}.jpg" for i in range(24)],
                          "source": [f"p{i}.jpg" for i in range(24)],
                          "label": [f"c{i % 5}" for i in range(24)]})
    return write_store(path, rows, items, encoder={"name": "random"}, dtype="float16")


def test_mined_scores_are_cosines_at_most_one(tmp_path):
    store = copies_store(tmp_path / "s")
    x = store.vectors("float32")
    assert float((x * x).sum(1).max()) > 1.0  # the case: a product of a row with its copy
    for fmt, cols in (("triplet", ["neg_score"]), ("labeled-pair", ["score"]),
                      ("n-tuple", ["neg_score_1", "neg_score_2"])):
        table = pairkit.mine_pairs(store, relation="label", hard=True, num_negatives=2,
                                   format=fmt)
        for col in [*cols, "pos_score"] if fmt != "labeled-pair" else cols:
            values = table[col].dropna().to_numpy()
            assert values.max() <= 1.0 and values.min() >= -1.0, (fmt, col)
    same = pairkit.mine_pairs(store, relation="label", hard=True, num_negatives=1,
                              max_score=1.0)
    # a copy's product of 1.0001 is a cosine of 1: --max-score 1 excludes nothing
    assert (same["neg_score"] == 1.0).any()
