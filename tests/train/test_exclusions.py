"""In-batch negatives leave out what the table says is the anchor's same thing: found by
a bug hunt (2026-12-06), where one epoch pushed away 875 of 1,279 eliminated false
negatives and 1,615 (anchor, own mined positive) pairs through the in-batch path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pairkit.train.config import TrainConfig
from pairkit.train.epoch import batches, device_data, forward, make_autocast
from pairkit.train.exclusions import batch_table, excluded_keys
from pairkit.train.losses.candidates import PairGroups, build_candidates
from pairkit.train.positives import PositiveSets
from pairkit.train.run_pairs import epoch_pairs, run_pairs
from tests.conftest import random_store


def batch_exclusions(keys: np.ndarray, groups: np.ndarray, anchor_groups: np.ndarray,
                     positive_groups: np.ndarray) -> np.ndarray:
    """The (2B, 2B) mask the training expands (symmetric: every view a row and a column)
    from the batch's table."""
    table, index = batch_table(keys, groups, anchor_groups, positive_groups)
    pairs = torch.zeros(len(anchor_groups), 2, dtype=torch.long)
    known = PairGroups(pairs, torch.from_numpy(table), torch.from_numpy(index))
    return known.excluded(symmetric=True).numpy()


def test_keys_and_a_batch_by_hand() -> None:
    groups = np.array([0, 0, 1, 1, 2, 3])  # rows 0-5; sources 0..3
    # row 0's mined positive: row 4 (source 2); flagged: (anchor row 2, negative row 5)
    mined = PositiveSets(np.array([0, 1, 1, 1, 1, 1, 1]), np.array([4]), np.ones(1, np.float32))
    keys = excluded_keys(groups, mined, np.array([[2, 5]]))
    n = 4
    assert keys.tolist() == sorted([0 * n + 2, 2 * n + 0, 1 * n + 3, 3 * n + 1])
    # a batch of pairs (1, 0) [source 0 with its view], (3, 2) [source 1], (5, 4) [3 with 2]
    ex = batch_exclusions(keys, groups, np.array([0, 1, 3]), np.array([0, 1, 2]))
    # views: anchors of groups 0, 1, 3 then positives of groups 0, 1, 2
    want = np.zeros((6, 6), bool)
    for r, (ga, gp) in enumerate([(0, 0), (1, 1), (3, 2)] * 2):
        for c, g in enumerate([0, 1, 3, 0, 1, 2]):
            want[r, c] = any((x * n + g) in set(keys.tolist()) for x in (ga, gp))
    assert (ex == want).all()
    assert ex[0, 5] and ex[1, 2] and ex[2, 3] and not ex[0, 1]


def test_the_batch_lookup_against_every_cell() -> None:
    """The range lookup of the batch's groups against a lookup of every (row, view) cell."""
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 40, size=200)
    pairs = rng.integers(0, 200, size=(300, 2))
    keys = excluded_keys(groups, None, pairs)
    n = int(groups.max()) + 1
    known = set(keys.tolist())
    for b in (1, 7, 64):
        ga, gp = groups[rng.integers(0, 200, b)], groups[rng.integers(0, 200, b)]
        views = np.concatenate([ga, gp])
        want = np.array([[any(int(x) * n + int(v) in known
                              for x in (ga[r % b], gp[r % b])) for v in views]
                         for r in range(2 * b)])
        assert (batch_exclusions(keys, groups, ga, gp) == want).all()


def test_an_excluded_candidate_is_no_negative() -> None:
    a = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    p = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    pairs = torch.tensor([[0, 0], [1, 1], [2, 2]])  # three sources with their views
    table = torch.zeros(3, 3, dtype=torch.bool)
    table[0, 1] = True  # source 0 knows source 1 is the same thing (one way, for the test)
    known = PairGroups(pairs, table, torch.tensor([0, 1, 2, 0, 1, 2]))
    for symmetric in (False, True):
        _, _, plain = build_candidates(a, p, groups=pairs, symmetric=symmetric)
        _, _, neg = build_candidates(a, p, groups=known, symmetric=symmetric)
        # the rows of pair 0 lose the views of source 1 as negatives, nothing else changes
        rows = [0, 3] if symmetric else [0]
        cols = [1, 4] if symmetric else [1]
        for r in rows:
            for c in cols:
                assert plain[r, c] and not neg[r, c]
                plain[r, c] = False
        assert (plain == neg).all()


def test_an_epoch_pushes_away_no_known_same_thing(tmp_path) -> None:
    import pairkit

    store = random_store(tmp_path / "s", n_sources=40, views=2, dim=12, classes=4)
    table = pairkit.mine_pairs(store, num_negatives=3, filter_false_negatives=True,
                               fn_mode="keep",
                               fn_rules="near-duplicate,mutual-neighbour,cluster")
    flagged = table["false_negative"].fillna(False).astype(bool)
    assert flagged.any() and (table["positive_kind"] == "mined").any()
    cfg = TrainConfig(relation=None, batch_size=64)
    rp = run_pairs(store, cfg, table, "t", lambda _: None)
    groups = rp.groups
    known = {(int(groups[a]), int(groups[x])) for a, x in
             zip(table.loc[flagged, "anchor_id"], table.loc[flagged, "negative_id"],
                 strict=True)}
    m = rp.mined
    for a in range(store.count):
        for x in m.ids[m.offsets[a]:m.offsets[a + 1]]:
            known |= {(int(groups[a]), int(groups[x])), (int(groups[x]), int(groups[a]))}
    known |= {(y, x) for x, y in known}
    data, _ = device_data(store.vectors(np.float32), groups, torch.device("cpu"))
    data.excluded = rp.excluded
    autocast = make_autocast(torch.device("cpu"), None)
    pushed = checked = 0
    for epoch in range(2):
        e = epoch_pairs(rp, cfg, epoch)
        for start, stop in batches(len(e), cfg.batch_size):
            rows = np.arange(start, stop)
            za, zp, zn, valid, attract, g, *_ = forward(torch.nn.Identity(), data, e, rows,
                                                        autocast)
            _, _, neg = build_candidates(za, zp, zn, valid, attract, g)
            b = len(rows)
            ga, gp = groups[e.anchor[rows]], groups[e.positive[rows]]
            for i in range(b):
                for j in np.flatnonzero(neg[i, :b].numpy()):
                    checked += 1
                    assert gp[j] not in (ga[i], gp[i])
                    pushed += (int(ga[i]), int(gp[j])) in known or \
                        (int(gp[i]), int(gp[j])) in known
    assert checked > 1000 and pushed == 0


def test_supcon_leaves_known_same_things_out_of_each_others_denominators() -> None:
    """SupCon by hand (t = 1): rows at 0, 90, 0, 90, 180, 270 and 90 degrees; pairs
    (0 -> 1), (2 -> 3), (4 -> 5), each a source with its view (groups 0, 1, 2), pair 2
    with mined negative row 6 (group 3; pairs 0 and 1 padding). The table flagged rows 2
    and 6 as false negatives of row 0: groups 0 ~ 1 and 0 ~ 3. As in InfoNCE, a feature
    known to be the same thing as another pair's is left out of that pair's denominators
    (both ways); a pair's own mined negative stays its negative."""
    import math

    from pairkit.train.data import PairArrays
    from pairkit.train.losses import LossConfig, batch_loss
    from tests.train.test_losses import unit

    groups = np.array([0, 0, 1, 1, 2, 2, 3])
    data, _ = device_data(unit(0, 90, 0, 90, 180, 270, 90).numpy(), groups,
                          torch.device("cpu"))
    data.excluded = excluded_keys(groups, None, np.array([[0, 2], [0, 6]]))
    pairs = PairArrays(np.array([0, 2, 4]), np.array([1, 3, 5]), np.array([[-1], [-1], [6]]),
                       np.zeros((3, 1), bool))
    autocast = make_autocast(torch.device("cpu"), None)
    out = forward(torch.nn.Identity(), data, pairs, np.arange(3), autocast,
                  with_negatives=True)
    cfg = LossConfig(name="supcon", temperature=1.0, keep_input=0.0)
    got = batch_loss(cfg, *out[:8], rows=out[8])
    e = math.e
    # features a0 a1 a2 p0 p1 p2 n2 at 0 0 180 90 90 270 90; each row's positive at 90 deg
    # (cosine 0); n2 (group 3) has no positive. Denominators, cosines of the rest:
    want = [math.log(2 + 1 / e),      # a0: p0 0, a2 -1, p2 0 (a1, p1, n2 known)
            math.log(3 + 1 / e),      # a1: p1 0, a2 -1, p2 0, n2 0 (a0, p0 known)
            math.log(4 + 2 / e),      # a2: a0 -1, a1 -1, p0 0, p1 0, p2 0, n2 0
            math.log(2 + 1 / e),      # p0: a0 0, a2 0, p2 -1
            math.log(2 + e + 1 / e),  # p1: a1 0, a2 0, p2 -1, n2 1
            math.log(3 + 3 / e)]      # p2: a0 0, a1 0, a2 0, p0 -1, p1 -1, n2 -1
    assert float(got) == pytest.approx(sum(want) / 6, abs=1e-6)
    # the defect's value: every other feature in every denominator
    # (a0 and a1: 4 + e + 1/e; a2: 4 + 2/e; p0 and p1: 3 + 2e + 1/e; p2: 3 + 3/e)
    before = (2 * math.log(4 + e + 1 / e) + math.log(4 + 2 / e) + 2 * math.log(3 + 2 * e + 1 / e)
              + math.log(3 + 3 / e)) / 6
    assert float(got) != pytest.approx(before, abs=1e-3)
    # InfoNCE reads the same batch table whether or not it holds the negatives' groups
    plain = forward(torch.nn.Identity(), data, pairs, np.arange(3), autocast)
    infonce = LossConfig(keep_input=0.0)
    assert torch.equal(batch_loss(infonce, *out[:8]), batch_loss(infonce, *plain[:8]))
