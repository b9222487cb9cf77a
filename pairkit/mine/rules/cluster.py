"""``cluster``: the candidate shares the anchor's cluster in at least
``cluster_votes`` of several seeded spectral-clustering runs (consensus
clustering, "evidence accumulation", Fred & Jain 2005).

Why this form: on real embeddings a class is a broad, often stretched region, not
a tight neighbourhood (with an ImageNet CNN on Fashion-MNIST, half of the 300th
nearest neighbours still share the anchor's class), so local rules (k-reciprocal
sets, rank windows, small kNN communities) leave most false negatives in.
Clusters of about class size catch them. The clusters are found in the spectral
embedding of the kNN graph (:mod:`pairkit.mine.spectral`), which follows curved
class regions that k-means on the raw vectors cuts by style; one k-means run
cuts at arbitrary borders, so a candidate that shares the anchor's cluster in
*any* of a few seeded runs is flagged (the border cases). The number of clusters
is read off the graph's spectrum unless ``cluster_ks`` gives it. Measurements:
docs/benchmarks.md, "False negatives on real images".

Guard: clusters only help when they hold classes. When a store has far more fine
classes than the spectrum can resolve (thousands of identities, a sample too sparse to
see them), the runs cut arbitrary regions that disagree, and "any run" would flag most
pairs. So the share of random pairs the rule flags is measured on a fixed sample of
pairs (:func:`choose_votes`): the votes needed go up until it is at most
``cluster_max_share`` (0.5; the real sets measured flag 0.12-0.40 with one vote), and
when even agreement of every run flags more, the rule flags nothing and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.shown import percent, percent_above
from pairkit.mine.fn_context import FnContext

if TYPE_CHECKING:
    from pairkit.mine.false_negatives import FalseNegativeConfig

NAME = "cluster"
REASON = "cluster"
SIMILARITY = True


def embedding(ctx: FnContext, config: FalseNegativeConfig) -> Any:
    """The spectral embedding of the store's kNN graph (computed once)."""
    from pairkit.mine.spectral import spectral_embedding

    if ctx.spectral is None:
        ctx.spectral = spectral_embedding(
            ctx.vectors, ctx.sources, m=config.cluster_neighbours, seed=ctx.seed,
            principal=ctx.principal)
    return ctx.spectral


def cluster_ks(ctx: FnContext, config: FalseNegativeConfig) -> tuple[int, ...]:
    """The cluster counts of the runs: the config's (capped at N), else the number of
    graph eigenvalues >= ``cluster_eigen_threshold`` (recorded in ``ctx.cluster_info``)."""
    n = ctx.count
    if config.cluster_ks:
        ctx.cluster_info.setdefault("k", [min(n, k) for k in config.cluster_ks])
        ctx.cluster_info.setdefault("auto", False)
        if any(k > n for k in config.cluster_ks):  # said, not hidden
            ctx.cluster_info.setdefault("given", list(config.cluster_ks))
        return tuple(min(n, k) for k in config.cluster_ks)
    if "k" not in ctx.cluster_info:
        emb = embedding(ctx, config)
        k = emb.cluster_count(config.cluster_eigen_threshold)
        ctx.cluster_info.update(
            k=[k], auto=True,
            eigenvalues=[round(float(v), 4) for v in emb.eigenvalues[: k + 4]])
    return tuple(ctx.cluster_info["k"])


def assignments(ctx: FnContext, config: FalseNegativeConfig) -> Any:
    """(G, N): cluster of each item in each run (G = len(ks) x runs), in the smallest
    signed integer type that holds them (:func:`compact`); above the spectral sample by
    code (:class:`~pairkit.core.coded_rows.CodedRuns`, indexed as the array)."""
    from pairkit.mine.spectral import cluster_runs

    if ctx.cluster_assign is not None and ctx.cluster_key is None:
        return ctx.cluster_assign  # set by hand
    ks = cluster_ks(ctx, config)
    key = (ks, config.cluster_runs, config.cluster_niter)
    if ctx.cluster_key != key:
        emb = embedding(ctx, config)
        parts = [compact(cluster_runs(emb, k, config.cluster_runs, seed=ctx.seed + 7919 * g,
                                      niter=config.cluster_niter))
                 for g, k in enumerate(ks)]
        ctx.cluster_assign = joined(parts, ctx.count)
        ctx.cluster_key = key
        choose_votes(ctx, config)
        emb.cells.clear()  # the extension's cells (16 bytes a row): done with them
    return ctx.cluster_assign


def compact(assign: Any) -> Any:
    """``assign`` (cluster numbers, >= 0; an array or by code, a
    :class:`~pairkit.core.coded_rows.CodedRuns`) as int16 when they fit (always, for the
    counts the spectrum reads: at most 64), else int32 or int64: 16 bytes a row for 8
    runs instead of 64 (0.5 GB at 8M rows), kept for the run and shipped to a cluster's
    block workers; by code, the table so (the rows' codes are 2 bytes a row for all)."""
    from pairkit.core.coded_rows import CodedRuns

    if isinstance(assign, CodedRuns):
        return assign.with_table(compact(assign.table))
    top = int(assign.max()) if assign.size else 0
    for dtype in (np.int16, np.int32):
        if top <= np.iinfo(dtype).max:
            return assign.astype(dtype)
    return assign


def joined(parts: list[Any], n: int) -> Any:
    """The runs of several cluster counts as one (G, N): by code when they share their
    codes (one count, the default), else as an array."""
    from pairkit.core.coded_rows import CodedRuns

    if not parts:
        return np.zeros((0, n), np.int16)
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, CodedRuns) and p.codes is parts[0].codes for p in parts):
        return parts[0].with_table(np.concatenate([p.table for p in parts]))
    return np.concatenate([np.asarray(p) for p in parts])


PAIR_SAMPLE = 50_000


def random_pairs(n: int, sources: np.ndarray, *, pairs: int = PAIR_SAMPLE,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A fixed seeded sample of random pairs of rows of different sources."""
    rng = np.random.default_rng([seed, 31])
    a, b = rng.integers(0, n, pairs), rng.integers(0, n, pairs)
    keep = sources[a] != sources[b]
    return a[keep], b[keep]


def pair_runs(assign: Any, sources: np.ndarray, *, pairs: int = PAIR_SAMPLE,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, shared)``: the random pairs of :func:`random_pairs` and, per pair, the
    runs of ``assign`` in which they share a cluster (the sample the votes and the
    diffusion threshold are both chosen on)."""
    runs, n = assign.shape
    if n < 2 or runs == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    a, b = random_pairs(n, sources, pairs=pairs, seed=seed)
    return a, b, (assign[:, a] == assign[:, b]).sum(axis=0)


def shares_of(shared: np.ndarray, runs: int) -> np.ndarray:
    """``share[v - 1]``: the share of the pairs counted in ``shared`` (:func:`pair_runs`)
    that share a cluster in at least ``v`` of the ``runs``."""
    if len(shared) == 0:
        return np.zeros(max(runs, 1))
    return np.array([(shared >= v).mean() for v in range(1, runs + 1)])


def vote_shares(assign: np.ndarray, sources: np.ndarray, *, pairs: int = PAIR_SAMPLE,
                seed: int = 0) -> np.ndarray:
    """``share[v - 1]``: the share of random pairs (two rows of different sources, a fixed
    seeded sample: :func:`random_pairs`) that share a cluster in at least ``v`` of the
    runs of ``assign``."""
    return shares_of(pair_runs(assign, sources, pairs=pairs, seed=seed)[2], assign.shape[0])


def choose_votes(ctx: FnContext, config: FalseNegativeConfig) -> int:
    """The votes the rule needs on this store (0: the rule is off), recorded in
    ``ctx.cluster_info`` (``votes``, ``random_pair_share``, ``off``), and the diffusion
    threshold (:func:`choose_diffusion`)."""
    from pairkit.mine.false_negatives import DEFAULT_CLUSTER_VOTES

    assign = ctx.cluster_assign
    runs = 0 if assign is None else assign.shape[0]
    asked = min(config.cluster_votes, max(runs, 1))
    if config.cluster_votes_default and ctx.cluster_key is None:
        asked = min(DEFAULT_CLUSTER_VOTES, max(runs, 1))  # set by hand: no threshold
    if runs == 0:
        return asked
    a, b, shared = pair_runs(assign, ctx.sources, seed=ctx.seed)
    share = shares_of(shared, runs)
    votes = next((v for v in range(asked, runs + 1)
                  if share[v - 1] <= config.cluster_max_share), 0)
    info = ctx.cluster_info
    for key in ("off", "cut_off", "raised", "diffusion", "diffusion_raised"):
        info.pop(key, None)
    info["votes"] = votes
    info["votes_for"] = (config.cluster_votes, config.cluster_max_share,
                         config.cluster_diffusion)
    info["random_pair_share"] = round(float(share[(votes or runs) - 1]), 4)
    cap = config.cluster_max_share
    diffusion = config.cluster_diffusion > 0 and ctx.cluster_key is not None
    if votes == 0:
        every = "its one run" if runs == 1 else f"all {runs} runs"
        together = (f"its clusters put {percent_above(share[runs - 1], cap)} of random "
                    f"pairs together even in {every} (> {percent(cap)})")
        if diffusion and two_clusters(assign) and share[runs - 1] <= TWO_CLUSTER_SHARE:
            # a cut in two of shares p and 1 - p puts p^2 + (1 - p)^2 >= 1/2 of random
            # pairs together whatever the store holds, so it can't pass the guard: with
            # both parts at least a quarter of the rows (a real split, not a few rows cut
            # off), the threshold, which reads the same embedding pair by pair, flags
            # alone (raised to the cap)
            info["cut_off"] = f"{together}, as two clusters always do"
            choose_diffusion(ctx, config, (a, b, np.zeros(len(a), dtype=bool)))
            return 0
        info["off"] = f"{together}: no class structure found, the rule flags nothing"
    elif votes != asked:
        info["raised"] = (f"{votes} of {runs} runs needed: with {asked} the rule would flag "
                          f"{percent_above(share[asked - 1], cap)} of random pairs (> "
                          f"{percent(cap)})")
    if votes and diffusion:
        choose_diffusion(ctx, config, (a, b, shared >= votes))
    return votes


# the most random pairs two clusters that agree may put together for the diffusion
# threshold to flag alone: p^2 + (1 - p)^2 at p = 1/4 (choose_votes)
TWO_CLUSTER_SHARE = 0.625


def two_clusters(assign: Any) -> bool:
    """Whether every run of ``assign`` (G, N; an array or by code,
    :class:`~pairkit.core.coded_rows.CodedRuns`: its table's values, not a row each) cut
    the rows into at most two clusters."""
    return all(len(np.unique(np.asarray(getattr(run, "values", run)))) <= 2
               for run in (assign[g] for g in range(assign.shape[0])))


def coordinates(ctx: FnContext, config: FalseNegativeConfig) -> Any:
    """(N, dims) float16: every row's diffusion coordinates (computed once; the cluster
    runs' embedding, :func:`pairkit.mine.spectral.all_coordinates`: an array, or by code
    above the spectral sample)."""
    from pairkit.mine.spectral import all_coordinates

    if ctx.diffusion is None:
        ctx.diffusion = all_coordinates(embedding(ctx, config), seed=ctx.seed)
    return ctx.diffusion


def diffusion_cosines(x: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosines of rows ``a`` and ``b`` (same shape) of the unit coordinates ``x`` (an
    array or :class:`~pairkit.core.coded_rows.CodedRows`), float32."""
    left = np.asarray(x[a.ravel()], dtype=np.float32)
    right = np.asarray(x[b.ravel()], dtype=np.float32)
    return np.einsum("ij,ij->i", left, right).reshape(a.shape)


def choose_diffusion(ctx: FnContext, config: FalseNegativeConfig,
                     pairs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """The diffusion-cosine threshold on this store: ``config.cluster_diffusion``, raised
    until the rule (votes or threshold) flags at most ``cluster_max_share`` of the random
    pairs ``pairs`` (``(a, b, voted)``: :func:`choose_votes`'s sample and whether the
    votes flag each); recorded in ``ctx.cluster_info`` (``diffusion``,
    ``random_pair_share``, ``diffusion_raised``)."""
    x = coordinates(ctx, config)
    a, b, voted = pairs
    info = ctx.cluster_info
    threshold = float(config.cluster_diffusion)
    if len(a) == 0:
        info["diffusion"] = threshold
        return threshold
    cos = diffusion_cosines(x, a, b)
    share = float((voted | (cos >= threshold)).mean())
    if share > config.cluster_max_share:
        # the share of pairs the threshold may add; above it, the lowest cosine that keeps
        # the rule's share at the cap (at least the asked threshold)
        room = max(0, int(np.floor(config.cluster_max_share * len(a))) - int(voted.sum()))
        rest = np.sort(cos[~voted])[::-1]
        raised = float(np.nextafter(rest[room], np.float32(2))) if room < len(rest) else 1.0
        info["diffusion_raised"] = (
            f"diffusion cosine >= {raised:.3f} needed: with {threshold} the rule would flag "
            f"{percent_above(share, config.cluster_max_share)} of random pairs (> "
            f"{percent(config.cluster_max_share)})")
        threshold = max(threshold, raised)
        share = float((voted | (cos >= threshold)).mean())
    info["diffusion"] = threshold  # as used (a raised one is not rounded)
    info["random_pair_share"] = round(share, 4)
    return threshold


def votes_needed(ctx: FnContext, config: FalseNegativeConfig) -> int:
    """The votes a candidate needs (after :func:`assignments`); 0: the runs' clusters
    flag nothing (the rule is off, or its diffusion threshold flags alone:
    :func:`diffusion_threshold`)."""
    assignments(ctx, config)
    if ctx.cluster_info.get("votes_for") != (config.cluster_votes, config.cluster_max_share,
                                             config.cluster_diffusion):
        return choose_votes(ctx, config)  # assignments set by hand, or another config
    return int(ctx.cluster_info["votes"])


def diffusion_threshold(ctx: FnContext, config: FalseNegativeConfig) -> float | None:
    """The diffusion-cosine threshold in use (after :func:`votes_needed`); None: not used
    (``cluster_diffusion`` 0, runs set by hand, or the rule off)."""
    value = ctx.cluster_info.get("diffusion")
    return None if value is None else float(value)


def prepare(ctx: FnContext, config: FalseNegativeConfig) -> None:
    assignments(ctx, config)


def flag(ctx: FnContext, anchors: np.ndarray, cand: np.ndarray, scores: np.ndarray,
         pos_scores: np.ndarray, config: FalseNegativeConfig,
         positives: np.ndarray | list[np.ndarray] | None) -> np.ndarray:
    """(n, k) bool: candidate in the anchor's cluster in >= the votes needed, or at a
    diffusion cosine >= the threshold (:func:`diffusion_threshold`)."""
    assign = assignments(ctx, config)
    need = votes_needed(ctx, config)
    threshold = diffusion_threshold(ctx, config)
    if need == 0 and (threshold is None or ctx.diffusion is None):
        return np.zeros(cand.shape, dtype=bool)
    safe = np.maximum(cand, 0)
    flagged = np.zeros(cand.shape, dtype=bool)
    if need:
        votes = np.zeros(cand.shape, dtype=np.int32)
        for g in range(assign.shape[0]):
            votes += assign[g][anchors][:, None] == assign[g][safe]
        flagged = votes >= need
    if threshold is not None and ctx.diffusion is not None:
        pair_a = np.broadcast_to(np.asarray(anchors)[:, None], cand.shape)
        flagged |= diffusion_cosines(ctx.diffusion, pair_a, safe) >= threshold
    return (cand >= 0) & flagged
