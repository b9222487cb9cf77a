"""The cluster rule: spectral embedding of the kNN graph, the cluster count read off its
spectrum, consensus of k-means runs, the PCA the graph is searched in, and the mining
path that skips the anchor's own clusters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_rand_score

from pairkit.core.coded_rows import CodedRows
from pairkit.index.kmeans import spherical_kmeans
from pairkit.mine.clusters import pca_reduce
from pairkit.mine.false_negatives import FalseNegativeConfig, build_context
from pairkit.mine.spectral import cluster_runs, knn_graph_approx, spectral_embedding


def blobs(k: int, per: int, d: int, spread: float = 0.15, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    x = np.repeat(centers, per, axis=0) + spread * rng.normal(size=(k * per, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_spherical_kmeans_finds_clean_blobs_from_any_seed():
    """k-means++ seeding: no run merges two blobs (FAISS's random start did, 1 in 10)."""
    x = blobs(4, 40, 12, spread=0.1)
    truth = np.repeat(np.arange(4), 40)
    for seed in range(20):
        assign, cents = spherical_kmeans(x, 4, seed=seed)
        assert adjusted_rand_score(truth, assign) == 1.0
        np.testing.assert_allclose(np.linalg.norm(cents, axis=1), 1.0, atol=1e-5)


def test_knn_graph_approx_equals_brute_force_in_the_reduced_space():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(60, 8)).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    sources = np.arange(60) // 2
    rows = np.arange(0, 60)
    ids, scores = knn_graph_approx(z, sources, rows, 5, block=7)
    sim = z @ z.T
    for i in range(60):
        allowed = [j for j in np.argsort(-sim[i], kind="stable") if sources[j] != sources[i]]
        assert ids[i].tolist() == allowed[:5]
        np.testing.assert_allclose(scores[i], sim[i, allowed[:5]], atol=1e-5)


@pytest.mark.parametrize("k", [3, 6])
def test_spectral_count_and_runs_find_connected_groups(k):
    """Groups the kNN graph barely connects: the count of eigenvalues near 1 is the
    number of groups, and every run recovers them."""
    x = blobs(k, 50, 16, spread=0.05, seed=k)
    emb = spectral_embedding(x, np.arange(len(x)), m=8)
    assert emb.cluster_count() == k
    truth = np.repeat(np.arange(k), 50)
    for run in cluster_runs(emb, k, 3):
        assert adjusted_rand_score(truth, run) == 1.0


def test_spectral_on_a_sample_extends_to_every_row():
    x = blobs(4, 300, 16, spread=0.08, seed=2)
    truth = np.repeat(np.arange(4), 300)
    emb = spectral_embedding(x, np.arange(len(x)), m=8, sample=400, seed=0)
    assert len(emb.rows) == 400
    runs = cluster_runs(emb, emb.cluster_count(), 2)
    assert runs.shape == (2, 1200)
    for run in runs:
        assert adjusted_rand_score(truth, run) > 0.99


def test_spectral_extension_by_small_blocks_equals_one_block(monkeypatch):
    # the rows outside the sample are labelled a few at a time (a fixed memory) with the
    # same result as all at once
    from pairkit.mine import spectral

    x = blobs(4, 300, 16, spread=0.15, seed=3)
    emb = spectral_embedding(x, np.arange(len(x)), m=8, sample=400, seed=0)
    whole = cluster_runs(emb, 4, 2, seed=5)
    monkeypatch.setattr(spectral, "EXTEND_BLOCK_BYTES", 4 * 100 * 7)  # a few rows a block
    np.testing.assert_array_equal(cluster_runs(emb, 4, 2, seed=5), whole)


def test_pca_reduce_spans_the_leading_components():
    rng = np.random.default_rng(4)
    basis = np.linalg.qr(rng.normal(size=(64, 3)))[0]  # data near a 3-d subspace
    x = (rng.normal(size=(500, 3)) * [5.0, 3.0, 2.0]) @ basis.T
    x = (x + 0.01 * rng.normal(size=(500, 64)) + 0.3).astype(np.float32)
    c = x - x.mean(0)
    vt = np.linalg.svd(c, full_matrices=False)[2][:3]  # exact PCA, the reference
    ref = c @ vt.T
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    for sample, tol in ((20_000, 0.02), (400, 0.1)):  # fitted on all rows, on a sample
        z = pca_reduce(x, 3, sample=sample, seed=0)
        assert z.shape == (500, 3)
        np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)
        # same subspace: z = ref @ R for an orthogonal R (rows share their norms)
        r, *_ = np.linalg.lstsq(ref, z, rcond=None)
        np.testing.assert_allclose(ref @ r, z, atol=tol)
        np.testing.assert_allclose(r @ r.T, np.eye(3), atol=tol)


def test_consensus_flags_any_shared_run_and_auto_k_is_recorded():
    x = blobs(4, 40, 12, spread=0.1)
    cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=3, cluster_neighbours=8)
    ctx = build_context(x, None, np.arange(len(x)), cfg, seed=0)
    assert ctx.cluster_assign.shape == (3, len(x))
    assert ctx.cluster_info["auto"] and ctx.cluster_info["k"] == [4]
    truth = np.repeat(np.arange(4), 40)
    for run in ctx.cluster_assign:
        assert adjusted_rand_score(truth, run) == 1.0


def _store_with_blobs(tmp_path, labels: bool, base: np.ndarray | None = None):
    """Two views of each of ``base``'s rows (5 blobs of 30 by default), labelled by blob
    of 30 when ``labels``."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(5)
    base = blobs(5, 30, 16, spread=0.25, seed=5) if base is None else base
    views = np.concatenate([base, base + 0.05 * rng.normal(size=base.shape)]).astype(np.float32)
    views /= np.linalg.norm(views, axis=1, keepdims=True)
    n = len(base)
    items = pd.DataFrame({"path": [f"s{i % n}.png" for i in range(2 * n)],
                          "source": [f"s{i % n}.png" for i in range(2 * n)],
                          "view": [i // n for i in range(2 * n)],
                          "label": [f"c{(i % n) // 30}" if labels else None
                                    for i in range(2 * n)]})
    return write_store(tmp_path / "store", views, items, encoder={"name": "blobs"})


def _full_search_gives(fast, monkeypatch, store, cfg, idx, fcfg):
    """Mine again with nothing skipped (no outside search) and check the table equals
    ``fast``; returns (table, stats) of that full search."""
    from pairkit.mine import command, rules_run

    monkeypatch.setattr(rules_run, "skippable_rows", lambda *a: None)
    slow, stats = command.mine_store(store, "instance", cfg, idx, fcfg)
    monkeypatch.undo()
    cols = ["anchor_id", "positive_id", "negative_id", "neg_rank"]
    pd.testing.assert_frame_equal(fast[cols].reset_index(drop=True),
                                  slow[cols].reset_index(drop=True))
    return slow, stats


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_mining_that_skips_own_clusters_equals_full_search(tmp_path, monkeypatch, kind):
    """The outside search is an optimisation only: with exact search the table is the
    one a full search plus the cluster flags gives (and with IVF it keeps the rule)."""
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig

    store = _store_with_blobs(tmp_path, labels=False)
    cfg = MineConfig(num_negatives=4, hard=True)
    fcfg = FalseNegativeConfig(rules=("near-duplicate", "cluster"), cluster_ks=(5,),
                               cluster_runs=3)
    idx = IndexOptions(kind=kind, nlist=4 if kind == "ivf" else None,
                          nprobe=4 if kind == "ivf" else None)
    fast, stats = mine_store(store, "instance", cfg, idx, fcfg)
    assert "not searched" in stats["index"]
    slow, stats2 = _full_search_gives(fast, monkeypatch, store, cfg, idx, fcfg)
    assert "not searched" not in stats2["index"]
    np.testing.assert_allclose(fast["neg_score"], slow["neg_score"], atol=1e-6)


def test_labels_decide_the_skipped_rows_when_every_row_has_one(tmp_path, monkeypatch):
    """Trusted labels on every row: the rows of the anchor's label are not searched (the
    label rule drops them all), and the table is the full search's; with a label
    missing, or flags kept, nothing is skipped."""
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig

    store = _store_with_blobs(tmp_path, labels=True)
    cfg = MineConfig(num_negatives=3, hard=True)
    fcfg = FalseNegativeConfig(cluster_runs=2)
    fast, stats = mine_store(store, "instance", cfg, None, fcfg)
    assert "rows of the anchor's label not searched (label rule)" in stats["index"]
    assert stats["label_rows_not_searched"] and not stats["cluster_rows_not_searched"]
    assert stats["negatives_same_label"] == 0.0
    _, stats2 = _full_search_gives(fast, monkeypatch, store, cfg, None, fcfg)
    assert "not searched" not in stats2["index"]
    keep = MineConfig(num_negatives=3, hard=True, fn_mode="keep")
    _, stats = mine_store(store, "instance", keep, None, fcfg)
    assert "not searched" not in stats["index"]
    items = store.items.copy()
    items.loc[3, "label"] = None
    from pairkit.core.store_writer import write_store

    partial = write_store(tmp_path / "partial", store.vectors(np.float32), items,
                          encoder={"name": "blobs"})
    _, stats = mine_store(partial, "instance", cfg, None, fcfg)
    assert "not searched" not in stats["index"]


def test_vote_shares_by_hand():
    from pairkit.mine.rules.cluster import vote_shares

    # 4 rows of 4 sources; 12 ordered pairs of two rows: 8 share a cluster in one run
    # (run 0: 0-1, 2-3; run 1: 1-2, 0-3), none in both
    assign = np.array([[0, 0, 1, 1], [0, 1, 1, 0]])
    share = vote_shares(assign, np.arange(4), pairs=200_000)
    assert abs(share[0] - 8 / 12) < 0.01 and share[1] == 0.0
    # rows of one source never form a pair: of 0-2, 0-3, 1-2, 1-3 two share run 1
    assert abs(vote_shares(assign, np.array([0, 0, 1, 1]), pairs=200_000)[0] - 0.5) < 0.01


def test_votes_go_up_until_the_rule_flags_at_most_the_cap_then_off():
    from pairkit.mine.rules import cluster

    x = blobs(4, 40, 12, spread=0.1)
    ctx = build_context(x, None, np.arange(len(x)),
                        FalseNegativeConfig(rules=("cluster",), cluster_runs=3), seed=0)
    rng = np.random.default_rng(3)
    # three runs of 2 clusters each, cut independently: "any run" puts ~7/8 of the
    # pairs together, "two runs" ~1/2, "all three" ~1/8
    ctx.cluster_assign = rng.integers(0, 2, (3, len(x)))
    share = cluster.vote_shares(ctx.cluster_assign, ctx.sources)
    for cap, want in ((0.95, 1), (0.6, 2), (0.2, 3), (0.05, 0)):
        ctx.cluster_info = {}
        # the votes alone: two-cluster runs that fail the guard leave the diffusion
        # threshold to flag alone (test_two_clusters_that_fail_the_guard_...)
        cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=3, cluster_votes=1,
                                  cluster_max_share=cap, cluster_diffusion=0.0)
        assert cluster.choose_votes(ctx, cfg) == want, (cap, share)
        info = ctx.cluster_info
        assert info["votes"] == want
        assert ("raised" in info) == (want > 1) and ("off" in info) == (want == 0)
    # off: nothing flagged, whatever the clusters say
    anchors, cand = np.array([0, 1]), np.array([[2, 3], [4, -1]])
    flags = cluster.flag(ctx, anchors, cand, np.zeros((2, 2)), np.zeros(2), cfg, None)
    assert not flags.any()
    assert "no class structure found" in ctx.cluster_info["off"]


def test_a_share_of_exactly_the_cap_keeps_the_rule_on(monkeypatch):
    """The rule is off when its votes flag *more* than cluster_max_share (> 50%) of the
    random pairs: a sample of which exactly half share a cluster leaves it on with one
    vote; a sample a hair above half turns it off. The sample is given by hand."""
    from pairkit.mine.rules import cluster

    x = blobs(2, 2, 4)
    ctx = build_context(x, None, np.arange(4), FalseNegativeConfig(rules=("cluster",),
                                                                  cluster_runs=1), seed=0)
    ctx.cluster_assign = np.array([[0, 0, 1, 1]])
    cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=1, cluster_votes=1,
                              cluster_max_share=0.5, cluster_diffusion=0.0)  # votes alone
    for shared, want in (([1, 1, 0, 0], 1), ([1, 1, 1, 0, 0], 0),
                         ([1] * 1001 + [0] * 999, 0)):
        def sample(assign, sources, *, pairs=0, seed=0, shared=shared):
            n = len(shared)
            return np.zeros(n, np.int64), np.ones(n, np.int64), np.array(shared)

        monkeypatch.setattr(cluster, "pair_runs", sample)
        ctx.cluster_info = {}
        assert cluster.choose_votes(ctx, cfg) == want, shared
        assert ("off" in ctx.cluster_info) == (want == 0)
        assert ctx.cluster_info["random_pair_share"] == round(float(np.mean(shared)), 4)


def test_off_line_reads_above_the_limit_with_its_counts_in_words():
    """A share just above the cap was printed "50% ... (> 50%)"; one run "all 1 runs"."""
    from pairkit.mine.rules import cluster
    from pairkit.mine.summary import summary_lines

    x = blobs(2, 2, 4)
    ctx = build_context(x, None, np.arange(4), FalseNegativeConfig(rules=("cluster",),
                                                                  cluster_runs=1), seed=0)
    # one run, rows 0-2 together: 6 of the 12 ordered pairs of two sources share a
    # cluster; the fixed sample of seed 0 measures a share a hair above 1/2
    ctx.cluster_assign = np.array([[0, 0, 0, 1]])
    share = float(cluster.vote_shares(ctx.cluster_assign, ctx.sources)[0])
    assert 0.5 < share < 0.505 and f"{share:.0%}" == "50%"
    cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=1, cluster_votes=1,
                              cluster_diffusion=0.0)  # the votes alone
    assert cluster.choose_votes(ctx, cfg) == 0
    assert ctx.cluster_info["off"].startswith(
        "its clusters put 50.1% of random pairs together even in its one run (> 50%)")
    # two runs that agree, under a cap given to 4 decimals
    ctx.cluster_info = {}
    ctx.cluster_assign = np.array([[0, 0, 0, 1], [0, 0, 0, 1]])
    cfg2 = FalseNegativeConfig(rules=("cluster",), cluster_runs=2, cluster_votes=1,
                               cluster_max_share=0.5004, cluster_diffusion=0.0)
    assert cluster.choose_votes(ctx, cfg2) == 0
    assert "put 50.1% of random pairs together even in all 2 runs (> 50.04%)" in (
        ctx.cluster_info["off"])
    stats = {"rows": 4, "format": "triplet", "anchors": 4, "relation": "instance",
             "index": "flat", "negatives_per_anchor": {"mean": 1.0, "min": 1, "max": 1},
             "anchors_short": 0, "removed": {},
             "clusters": {"k": [1], "auto": True, "runs": 1, "off": "x"}}
    line = next(x for x in summary_lines(stats, "p.csv") if x.startswith("cluster rule"))
    assert line.startswith("cluster rule: 1 cluster (read off the kNN graph's spectrum), "
                           "1 k-means run; off: x")
    stats["clusters"] = {"k": [3, 5], "auto": False, "runs": 8, "votes": 8}
    line = next(x for x in summary_lines(stats, "p.csv") if x.startswith("cluster rule"))
    assert line.startswith("cluster rule: 3, 5 clusters (given), 8 k-means runs, 8 must")


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_skipping_with_raised_votes_equals_full_search(tmp_path, monkeypatch, kind):
    """With more votes needed (the random-pair guard), the search skips only rows sharing
    the anchor's cluster in that many runs: still the table of a full search + flags."""
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.rules import cluster

    store = _store_with_blobs(tmp_path, labels=False)
    cfg = MineConfig(num_negatives=4, hard=True)
    # 8 clusters of 5 blobs: the runs cut the blobs in different places
    base = dict(rules=("near-duplicate", "cluster"), cluster_ks=(8,), cluster_runs=4,
                cluster_diffusion=0.0)  # the votes alone: their guard
    probe = build_context(store.vectors(np.float32), None, store.source_codes(),
                          FalseNegativeConfig(**base), seed=0)
    share = cluster.vote_shares(probe.cluster_assign, probe.sources)
    assert share[0] > share[-1] + 0.02, share
    fcfg = FalseNegativeConfig(**base, cluster_max_share=float(share[0] + share[-1]) / 2)
    idx = IndexOptions(kind=kind, nlist=4 if kind == "ivf" else None,
                          nprobe=4 if kind == "ivf" else None)
    fast, stats = mine_store(store, "instance", cfg, idx, fcfg)
    assert stats["clusters"]["votes"] > 1 and "raised" in stats["clusters"]
    assert f"at least {stats['clusters']['votes']} of 4" in stats["index"]
    _full_search_gives(fast, monkeypatch, store, cfg, idx, fcfg)


def test_pca_rows_read_on_demand_are_pca_reduce_rows():
    # the cluster rule's principal components are computed when read (no (N, dims) array
    # held): the same rows as the array, whether the input is an array or a view, and
    # whatever rows a read asks for
    from pairkit.core.row_view import RowView
    from pairkit.mine.clusters import pca_rows

    rng = np.random.default_rng(7)
    x = rng.normal(size=(300, 24)).astype(np.float32)
    for dims in (8, 24, 40):  # projected, and the rows themselves (d <= dims)
        whole = pca_reduce(x, dims, sample=200, seed=3)
        for source in (x, RowView(x)):
            lazy = pca_rows(source, dims, sample=200, seed=3)
            assert lazy.shape == whole.shape
            pick = np.array([5, 0, 299, 17, 5])
            np.testing.assert_allclose(lazy[pick], whole[pick], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.asarray(lazy), whole, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
    # the input is never changed (the normalisation works on copies)
    before = x.copy()
    pca_rows(x, 40)[np.arange(10)]
    np.testing.assert_array_equal(x, before)


def test_spectral_embedding_holds_no_copy_of_the_rows():
    from pairkit.core.row_view import is_view

    x = blobs(3, 200, 16, seed=4)
    emb = spectral_embedding(x, np.arange(len(x)), m=8, sample=300, seed=0)
    assert is_view(emb.reduced) and emb.reduced.shape == (600, 16)
    np.testing.assert_allclose(emb.reduced[np.arange(600)], pca_reduce(x, 128, sample=5_000),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_runs_and_coordinates_by_code_mine_the_table_of_arrays(tmp_path, monkeypatch, kind):
    """Above the spectral sample the cluster rule keeps every row's runs and diffusion
    coordinates by code (2 bytes a row): the whole label-free table (negatives, flags,
    scores, mined positives) equals the one mined with the same values as (G, N) and
    (N, dims) arrays."""
    from functools import partial

    from pairkit.core.coded_rows import CodedRows, CodedRuns
    from pairkit.index.options import IndexOptions
    from pairkit.mine import spectral
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.positives import PositiveConfig

    store = _store_with_blobs(tmp_path, labels=False,
                              base=blobs(5, 120, 16, spread=0.25, seed=8))
    monkeypatch.setattr(spectral, "spectral_embedding",
                        partial(spectral.spectral_embedding, sample=300))
    made: list[type] = []
    runs, coords = spectral.extended_runs, spectral.all_coordinates

    def recorded(fn, *args, **kwargs):
        out = fn(*args, **kwargs)
        made.append(type(out))
        return out

    monkeypatch.setattr(spectral, "extended_runs", partial(recorded, runs))
    monkeypatch.setattr(spectral, "all_coordinates", partial(recorded, coords))
    cfg = MineConfig(num_negatives=4, hard=True)
    fcfg = FalseNegativeConfig(rules=("near-duplicate", "mutual-neighbour", "cluster"),
                               cluster_ks=(5,))
    idx = IndexOptions(kind=kind, nlist=6 if kind == "ivf" else None,
                       nprobe=3 if kind == "ivf" else None)
    pos = PositiveConfig()
    coded, stats = mine_store(store, "instance", cfg, idx, fcfg, positives=pos)
    assert made == [CodedRuns, CodedRows] and "not searched" in stats["index"]
    assert stats["clusters"]["votes"] == 8 and stats["clusters"]["diffusion"] > 0
    made.clear()
    monkeypatch.setattr(spectral, "extended_runs",
                        lambda *a, **k: np.asarray(runs(*a, **k)))
    monkeypatch.setattr(spectral, "all_coordinates",
                        lambda *a, **k: np.asarray(coords(*a, **k)))
    dense, stats2 = mine_store(store, "instance", cfg, idx, fcfg, positives=pos)
    assert stats2["clusters"] == stats["clusters"]
    assert stats["fn_flagged"]["cluster"] > 0 and stats["mined_positives"]["rows"] > 0
    # the mined positives' confidence is the share of runs that agree: read by code
    assert coded["positive_confidence"].between(0, 1).any()
    pd.testing.assert_frame_equal(coded.reset_index(drop=True), dense.reset_index(drop=True))


def test_cluster_runs_are_kept_in_the_smallest_integer_type():
    # (G, N) runs as int16 (16 bytes a row for 8 runs, not 64), and the masked search that
    # skips an anchor's clusters gives the same results from them as from int64 runs
    from pairkit.index.outside import masked_exact_search
    from pairkit.mine.rules.cluster import compact

    assert compact(np.array([[0, 5, 63]])).dtype == np.int16
    assert compact(np.array([[0, 40_000]])).dtype == np.int32
    x = blobs(4, 150, 16, seed=6)
    cfg = FalseNegativeConfig(rules=("cluster",))
    ctx = build_context(x, None, np.arange(len(x)) // 2, cfg)
    from pairkit.mine.rules.cluster import assignments

    assign = assignments(ctx, cfg)
    assert assign.dtype == np.int16 and assign.shape[1] == len(x)
    rows = np.arange(0, 600, 7)
    got = masked_exact_search(x, assign, rows, 6, votes=2)
    want = masked_exact_search(x, assign.astype(np.int64), rows, 6, votes=2)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_far_in_and_diffusion_cosines_by_hand():
    from pairkit.index.outside import far_in
    from pairkit.mine.rules.cluster import diffusion_cosines

    deg = np.radians([0.0, 50.0, 70.0, 90.0])
    x = np.stack([np.cos(deg), np.sin(deg)], axis=1).astype(np.float16)
    # cosines to row 0: 1, 0.643, 0.342, 0
    assert far_in(x, np.array([0]), 0.5).tolist() == [[False, False, True, True]]
    assert far_in(x, np.array([0, 3]), 0.5, np.array([2, 3])).tolist() == [
        [True, True], [False, False]]
    got = diffusion_cosines(x, np.array([[0, 0], [1, 3]]), np.array([[1, 2], [2, 2]]))
    np.testing.assert_allclose(got, [[np.cos(deg[1]), np.cos(deg[2])],
                                     [np.cos(deg[1] - deg[2]), np.cos(deg[3] - deg[2])]],
                               atol=2e-3)


def test_rows_the_search_skips_are_flagged_at_the_threshold_within_rounding():
    """The searches' mask (a matrix product) skips only rows the flag (a row-wise sum)
    flags too: pairs whose cosine is the threshold to the last bit included."""
    from pairkit.index.outside import far_in
    from pairkit.mine.rules.cluster import diffusion_cosines
    from pairkit.mine.skip import SKIP_MARGIN

    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 48))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)
    rows = np.arange(300)
    pair_a = np.broadcast_to(rows[:, None], (300, 300))
    cos = diffusion_cosines(x, pair_a, np.broadcast_to(rows[None, :], (300, 300)))
    for threshold in np.sort(cos[cos > 0.1].ravel())[:: 997]:  # pairs right at it
        skipped = ~far_in(x, rows, float(threshold) + SKIP_MARGIN)
        assert (cos[skipped] >= threshold).all()
        assert skipped.sum() < (cos >= threshold).sum()  # the margin's rows are searched


def test_diffusion_coordinates_weighted_by_the_eigenvalues_and_extended_to_every_row():
    from pairkit.mine.spectral import (
        EIGEN_THRESHOLD,
        all_coordinates,
        diffusion_coordinates,
        diffusion_weights,
    )

    x = blobs(4, 300, 16, spread=0.08, seed=2)
    truth = np.repeat(np.arange(4), 300)
    emb = spectral_embedding(x, np.arange(len(x)), m=8, sample=400, seed=0)
    # lambda ** t with t such that the cluster threshold weighs 1/2
    np.testing.assert_allclose(diffusion_weights(np.array([1.0, EIGEN_THRESHOLD, 0.0, -0.2])),
                               [1.0, 0.5, 0.0, 0.0], atol=1e-6)
    ref = emb.x * diffusion_weights(emb.eigenvalues)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(diffusion_coordinates(emb), ref, atol=1e-6)
    coded = all_coordinates(emb, seed=0)
    # above the sample, stored by code: a 2-byte code per row into the cells' means and
    # the sampled rows' own coordinates
    assert isinstance(coded, CodedRows) and coded.codes.dtype == np.int16
    assert coded.shape == (1200, emb.x.shape[1]) and coded.dtype == np.float16
    assert len(coded.table) == int(coded.codes.max()) + 1 < 1200
    every = np.asarray(coded)
    np.testing.assert_array_equal(every[emb.rows], ref.astype(np.float16))
    np.testing.assert_allclose(np.linalg.norm(every.astype(np.float32), axis=1), 1.0,
                               atol=2e-3)
    # a row outside the sample sits with its blob's sampled rows: its cosine to their
    # mean direction is high, to every other blob's low
    means = np.stack([ref[truth[emb.rows] == b].mean(0) for b in range(4)])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    others = np.setdiff1d(np.arange(1200), emb.rows)
    sims = every[others].astype(np.float32) @ means.T
    assert (np.argmax(sims, axis=1) == truth[others]).all()
    assert np.sort(sims, axis=1)[:, -1].min() > 0.9


def test_diffusion_flags_by_the_threshold_or_every_run():
    """The rule flags a candidate that shares the anchor's cluster in every run or sits
    at a diffusion cosine >= the threshold: checked pair by pair against the context's
    runs and coordinates."""
    from pairkit.mine.rules import cluster

    x = blobs(6, 40, 12, spread=0.35, seed=9)
    cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=4, cluster_neighbours=8,
                              cluster_max_share=1.0)
    assert cfg.cluster_votes == 4  # every run, with the threshold on
    ctx = build_context(x, None, np.arange(len(x)), cfg, seed=0)
    assert cluster.votes_needed(ctx, cfg) == 4
    assert cluster.diffusion_threshold(ctx, cfg) == 0.4
    rng = np.random.default_rng(1)
    anchors = rng.integers(0, len(x), 30)
    cand = rng.integers(0, len(x), (30, 12))
    cand[0, 3] = -1
    flags = cluster.flag(ctx, anchors, cand, np.zeros(cand.shape), np.zeros(30), cfg, None)
    coords = ctx.diffusion.astype(np.float32)
    for i, a in enumerate(anchors):
        for j, c in enumerate(cand[i]):
            if c < 0:
                assert not flags[i, j]
                continue
            every = (ctx.cluster_assign[:, a] == ctx.cluster_assign[:, c]).all()
            near = float(coords[a] @ coords[c]) >= 0.4
            assert flags[i, j] == (every or near), (a, c)
    assert flags.any() and not flags.all()
    # without the threshold: the votes alone, two of the runs by default
    off = FalseNegativeConfig(rules=("cluster",), cluster_runs=4, cluster_neighbours=8,
                              cluster_max_share=1.0, cluster_diffusion=0.0)
    assert off.cluster_votes == 2
    ctx2 = build_context(x, None, np.arange(len(x)), off, seed=0)
    assert cluster.diffusion_threshold(ctx2, off) is None and ctx2.diffusion is None
    flags2 = cluster.flag(ctx2, anchors, cand, np.zeros(cand.shape), np.zeros(30), off, None)
    votes = (ctx2.cluster_assign[:, anchors][:, :, None]
             == ctx2.cluster_assign[:, np.maximum(cand, 0)]).sum(axis=0)
    np.testing.assert_array_equal(flags2, (votes >= 2) & (cand >= 0))


def test_diffusion_threshold_raised_until_the_cap_of_random_pairs():
    from pairkit.mine.rules import cluster

    x = blobs(4, 60, 12, spread=0.3, seed=4)
    sources = np.arange(len(x))
    base = dict(rules=("cluster",), cluster_runs=2, cluster_neighbours=8,
                cluster_diffusion=0.05)
    free = build_context(x, None, sources, FalseNegativeConfig(**base, cluster_max_share=1.0),
                         seed=0)
    a, b = cluster.random_pairs(len(x), sources, seed=0)
    cos = cluster.diffusion_cosines(free.diffusion, a, b)
    every = (free.cluster_assign[:, a] == free.cluster_assign[:, b]).all(axis=0)
    asked_share = float((every | (cos >= 0.05)).mean())
    assert free.cluster_info["random_pair_share"] == round(asked_share, 4)
    cap = (asked_share + float(every.mean())) / 2  # between the votes' share and the asked
    cfg = FalseNegativeConfig(**base, cluster_max_share=cap)
    ctx = build_context(x, None, sources, cfg, seed=0)
    info = ctx.cluster_info
    raised = cluster.diffusion_threshold(ctx, cfg)
    assert raised > 0.05 and "diffusion_raised" in info
    got = float((every | (cos >= raised)).mean())
    assert got <= cap < float((every | (cos >= raised - 0.01)).mean())
    assert info["random_pair_share"] == round(got, 4)


def test_summary_names_the_diffusion_threshold(tmp_path):
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.summary import summary_lines

    store = _store_with_blobs(tmp_path, labels=False)
    fcfg = FalseNegativeConfig(rules=("near-duplicate", "cluster"), cluster_ks=(5,),
                               cluster_runs=3)
    _, stats = mine_store(store, "instance", MineConfig(num_negatives=4, hard=True),
                          IndexOptions(kind="flat"), fcfg)
    assert "or at a diffusion cosine >= 0.402 to it not searched" in stats["index"]  # + margin
    line = next(x for x in summary_lines(stats, "p.parquet") if x.startswith("cluster rule"))
    assert "3 must agree, or a diffusion cosine >= 0.4" in line
    # a threshold the random-pair guard raised is shown to 3 decimals, as its own note is
    # (the demo printed "or a diffusion cosine >= 0.634755; diffusion cosine >= 0.635
    # needed")
    raised = {**stats, "clusters": {**stats["clusters"], "diffusion": 0.634755}}
    line = next(x for x in summary_lines(raised, "p.parquet") if x.startswith("cluster rule"))
    assert "or a diffusion cosine >= 0.635" in line and "0.634755" not in line
    # the rows the rule flags although its rows were skipped: the skip's margin, said so
    margin = "but for those within 0.002 of the diffusion threshold"
    for flags, said in (({"cluster": 7, "near_duplicate": 1}, True),
                        ({"near_duplicate": 1}, False)):
        flagged = next(x for x in summary_lines({**stats, "fn_flagged": flags}, "p.parquet")
                       if x.startswith("false negatives flagged"))
        assert "(cluster: rows sharing a cluster with the anchor were not searched" in flagged
        assert (margin in flagged) == said


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not _cuda(), reason="no CUDA GPU (the GPU suite runs this)"))])
@pytest.mark.parametrize("mode", ["eliminate", "keep"])
def test_torch_backend_mines_the_faiss_table_with_the_label_free_rules(tmp_path, mode, device):
    """``--backend torch`` changes the engine, not the table: the cluster rule's k-means
    runs (a spectral sample of at most 20,000 rows in 32-64 dims) are the same numpy runs
    on either engine (a torch k-means draws other seeds: 67 of 12,000 negatives of a real
    set differed before)."""
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig

    store = _store_with_blobs(tmp_path, labels=False, base=blobs(10, 30, 32, spread=3.0, seed=2))
    cfg = MineConfig(num_negatives=20, hard=True, fn_mode=mode)
    fcfg = FalseNegativeConfig(rules=("near-duplicate", "mutual-neighbour", "cluster"))
    tables = [mine_store(store, "instance", cfg, IndexOptions(backend=b, device=d),
                         fcfg)[0] for b, d in (("faiss", "cpu"), ("torch", device))]
    cols = ["anchor_id", "positive_id", "negative_id", "neg_rank"] + (
        ["false_negative", "fn_reason"] if mode == "keep" else [])
    pd.testing.assert_frame_equal(tables[0][cols].reset_index(drop=True),
                                  tables[1][cols].reset_index(drop=True))
    np.testing.assert_allclose(tables[0]["neg_score"], tables[1]["neg_score"], atol=1e-5)
    if mode == "keep":
        assert tables[0]["false_negative"].any()


def test_cluster_count_goes_past_the_first_32_eigenvectors() -> None:
    """40 well-separated groups give 40 clusters: with every one of the first 32
    eigenvalues above the threshold, more eigenvectors are fetched (up to MAX_CLUSTERS)."""
    rng = np.random.default_rng(0)
    directions = np.linalg.qr(rng.standard_normal((64, 64)))[0][:40]  # orthonormal rows
    x = np.repeat(directions, 10, axis=0) + 0.01 * rng.standard_normal((400, 64))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    emb = spectral_embedding(x, np.arange(len(x)))
    assert emb.cluster_count() == 40


def test_a_diffusion_cosine_exactly_at_the_threshold_is_flagged():
    """The rule flags a candidate at a diffusion cosine >= the threshold: exactly at it
    too (the masked search, :func:`pairkit.index.outside.far_in`, skips those)."""
    from pairkit.mine.rules import cluster

    cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=1, cluster_votes=1)
    ctx = build_context(blobs(2, 1, 4), None, np.arange(2), cfg, seed=0)
    ctx.cluster_assign = np.array([[0, 1]])  # never in one cluster: only the cosine flags
    ctx.diffusion = np.array([[1.0, 0.0], [0.5, 0.8660254]], np.float32)
    ctx.cluster_info = {"votes_for": (cfg.cluster_votes, cfg.cluster_max_share,
                                      cfg.cluster_diffusion), "votes": 1, "diffusion": 0.5}
    assert cluster.diffusion_cosines(ctx.diffusion, np.array([0]), np.array([1]))[0] == 0.5
    got = cluster.flag(ctx, np.array([0, 1]), np.array([[1], [0]]), None, None, cfg, None)
    np.testing.assert_array_equal(got, [[True], [True]])
    ctx.cluster_info["diffusion"] = 0.5001
    got = cluster.flag(ctx, np.array([0, 1]), np.array([[1], [0]]), None, None, cfg, None)
    np.testing.assert_array_equal(got, [[False], [False]])


def test_two_clusters_that_fail_the_guard_leave_the_diffusion_threshold_alone():
    """Two clusters put p^2 + (1 - p)^2 >= 1/2 of random pairs together whatever the
    store holds: when every run has two and they fail the guard, the diffusion threshold
    flags alone, raised to the cap; without a threshold the rule is off, as before."""
    from pairkit.mine.rules import cluster

    x = blobs(2, 80, 12, spread=0.3, seed=2)[:120]  # 80 and 40 rows: 0.56 together
    sources = np.arange(len(x))
    base = dict(rules=("cluster",), cluster_ks=(2,), cluster_runs=4, cluster_neighbours=8)
    cfg = FalseNegativeConfig(**base)
    ctx = build_context(x, None, sources, cfg, seed=0)
    info = ctx.cluster_info
    assert cluster.vote_shares(ctx.cluster_assign, sources)[-1] > 0.5
    assert "cut_off" in info and "off" not in info, info
    assert "as two clusters always do" in info["cut_off"]
    assert cluster.votes_needed(ctx, cfg) == 0
    threshold = cluster.diffusion_threshold(ctx, cfg)
    assert threshold is not None and threshold > 0.4 and "diffusion_raised" in info
    a, b = cluster.random_pairs(len(x), sources, seed=0)
    cos = cluster.diffusion_cosines(ctx.diffusion, a, b)
    share = float((cos >= threshold).mean())
    assert share <= 0.5 and info["random_pair_share"] == round(share, 4)
    rng = np.random.default_rng(0)
    anchors = rng.integers(0, len(x), 40)
    cand = rng.integers(0, len(x), (40, 10))
    flags = cluster.flag(ctx, anchors, cand, np.zeros(cand.shape), np.zeros(40), cfg, None)
    coords = ctx.diffusion.astype(np.float32)
    want = np.einsum("ij,ikj->ik", coords[anchors], coords[cand]) >= threshold
    np.testing.assert_array_equal(flags, want)
    assert flags.any() and not flags.all()
    # the votes alone (no threshold): off, nothing flagged
    votes_only = FalseNegativeConfig(**base, cluster_diffusion=0.0)
    ctx2 = build_context(x, None, sources, votes_only, seed=0)
    assert "off" in ctx2.cluster_info and "cut_off" not in ctx2.cluster_info
    assert not cluster.flag(ctx2, anchors, cand, np.zeros(cand.shape), np.zeros(40),
                            votes_only, None).any()


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_skipping_by_the_threshold_alone_equals_full_search(tmp_path, monkeypatch, kind):
    """Two clusters that fail the guard: the search skips the rows at the diffusion
    threshold only, and the table is that of a full search and the flags."""
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.rules import cluster
    from pairkit.mine.summary import summary_lines

    store = _store_with_blobs(tmp_path, labels=False)
    cfg = MineConfig(num_negatives=4, hard=True)
    base = dict(rules=("near-duplicate", "cluster"), cluster_ks=(2,), cluster_runs=4)
    probe = build_context(store.vectors(np.float32), None, store.source_codes(),
                          FalseNegativeConfig(**base, cluster_max_share=1.0), seed=0)
    every = cluster.vote_shares(probe.cluster_assign, probe.sources)[-1]
    fcfg = FalseNegativeConfig(**base, cluster_max_share=float(every) - 0.02)
    idx = IndexOptions(kind=kind, nlist=4 if kind == "ivf" else None,
                       nprobe=4 if kind == "ivf" else None)
    fast, stats = mine_store(store, "instance", cfg, idx, fcfg)
    clusters = stats["clusters"]
    assert "cut_off" in clusters and clusters["votes"] == 0, clusters
    assert "rows at a diffusion cosine >=" in stats["index"]
    text = "\n".join(summary_lines(stats, "p.parquet"))
    assert "alone: its clusters put" in text and "must agree" not in text
    _full_search_gives(fast, monkeypatch, store, cfg, idx, fcfg)


def test_two_clusters_with_a_few_rows_cut_off_stay_off():
    """Two clusters of which one holds under a quarter of the rows (a few rows cut off,
    not a split) fail the guard as before: the rule is off."""
    from pairkit.mine.rules import cluster

    x = blobs(2, 80, 12, spread=0.3, seed=2)
    sources = np.arange(len(x))
    cfg = FalseNegativeConfig(rules=("cluster",), cluster_runs=2, cluster_votes=1)
    ctx = build_context(x, None, sources, cfg, seed=0)
    for part, off in ((0.2, True), (0.3, False)):
        ctx.cluster_info = {}
        ctx.cluster_assign = np.tile((np.arange(len(x)) < part * len(x)).astype(np.int64), (2, 1))
        share = float(cluster.vote_shares(ctx.cluster_assign, sources)[-1])
        assert abs(share - (part ** 2 + (1 - part) ** 2)) < 0.01
        assert cluster.choose_votes(ctx, cfg) == 0
        assert ("off" in ctx.cluster_info) == off and ("cut_off" in ctx.cluster_info) != off


def test_two_clusters_reads_runs_by_code_from_their_table():
    from pairkit.core.coded_rows import CodedRuns
    from pairkit.mine.rules.cluster import two_clusters

    codes = np.array([0, 1, 1, 2, 0])
    assert two_clusters(CodedRuns(codes, np.array([[0, 1, 1], [1, 1, 0]])))
    assert not two_clusters(CodedRuns(codes, np.array([[0, 1, 1], [0, 1, 2]])))
    assert two_clusters(np.array([[0, 1, 1, 0, 0]])) and not two_clusters(np.array([[0, 1, 2]]))
