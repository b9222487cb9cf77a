"""Near-duplicate groups: exact copies by file hash, near copies by embedding similarity.

The unit of deduplication is the **source** (one image file), not the item:
views of one source are augmentations of the same file, never duplicates of
each other. Each source is represented by its lowest view (view 0, the plain
image); every view of a source gets its source's group id.

Steps (see docs/methods.md):

1. Sources with the same ``file_sha256`` are one node (an exact-duplicate set).
2. Nodes with similarity >= ``threshold`` are joined (streamed range search,
   :mod:`pairkit.index.range_search`) and their connected components found
   with a vectorised union-find, block by block.
3. Chain guard: a component is split greedily. The best remaining node by the
   keep rule becomes a representative; every remaining node of the component
   within ``threshold`` of it joins its group; repeat on what is left. So every
   member of a group is within the threshold of the group's representative,
   and a chain a~b~c with a !~ c never lands in one group unless b leads it.
4. A group needs at least two sources; a node left alone is in no group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.errors import PairkitError, UsageError
from pairkit.mine.thresholds import NEAR_DUPLICATE_THRESHOLD

if TYPE_CHECKING:
    import pandas as pd

# Measured on the planted-copy benchmark (tests/benchmarks/near_duplicates.py,
# docs/benchmarks.md) with the offline ``pixels`` encoder.
DEFAULT_THRESHOLD = NEAR_DUPLICATE_THRESHOLD
KEEP_RULES = ("best", "first", "largest", "central")
TABLE_COLUMNS = ("group", "id", "keep", "similarity", "match")

SizeInput = np.ndarray | Callable[[np.ndarray], np.ndarray] | None


@dataclass(frozen=True)
class NearDuplicates:
    """The result of :func:`find_near_duplicates`.

    ``item_group``: int64 (N,), group id of every item (all views of a grouped
    source), -1 for items in no group. ``table``: one row per grouped source,
    columns ``group, id, keep, similarity, match`` (id = the source's lowest-view
    row; similarity = float32 inner product with the group's representative;
    match = ``keep`` for the representative, ``exact`` for a byte-identical copy
    of it, ``near`` otherwise), sorted by group then keep-first then id.
    ``components_split``: components the chain guard split into several groups
    (or partly out of groups). ``keep_rule``: the rule actually used.
    """

    item_group: np.ndarray
    table: pd.DataFrame
    components_split: int
    keep_rule: str


def check_threshold(threshold: float) -> float:
    """Return ``threshold`` as a float or raise UsageError unless 0 < threshold <= 1."""
    t = float(threshold)
    if not (0.0 < t <= 1.0):
        raise UsageError(f"--threshold must be in (0, 1], got {threshold:g}")
    return t


def near_duplicate_groups(
    vectors: np.ndarray,
    threshold: float = DEFAULT_THRESHOLD,
    file_sha256: np.ndarray | None = None,
    sources: np.ndarray | None = None,
    views: np.ndarray | None = None,
    **kwargs: Any,
) -> np.ndarray:
    """Group id per item: int64 array of shape (N,), -1 for items in no group.

    ``vectors`` (N, d) are L2-normalised rows; ``file_sha256`` (N,) hex strings or
    None/NaN; ``sources`` (N,) any hashable labels (default: every item its own
    source); ``views`` (N,) view numbers (default: first occurrence = view 0).
    Other keyword arguments go to :func:`find_near_duplicates`.
    """
    return find_near_duplicates(
        vectors, threshold, file_sha256=file_sha256, sources=sources, views=views, **kwargs
    ).item_group


# -- union-find over streamed edges ---------------------------------------------------
def _merge_edges(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Join the components of edges (a, b); ``labels`` holds each node's root (min id).

    Returns the new labels (every node labelled by the smallest node of its component).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    la, lb = labels[a], labels[b]
    differ = la != lb
    if not differ.any():
        return labels
    la, lb = la[differ], lb[differ]
    involved, inverse = np.unique(np.concatenate([la, lb]), return_inverse=True)
    m = len(involved)
    graph = coo_matrix(
        (np.ones(len(la), dtype=np.int8), (inverse[: len(la)], inverse[len(la) :])),
        shape=(m, m),
    )
    _, comp = connected_components(graph, directed=False)
    # The smallest root of each small component becomes the root of all its roots.
    new_root = np.full(comp.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(new_root, comp, involved)
    remap = np.arange(len(labels), dtype=np.int64)
    remap[involved] = new_root[comp]
    return remap[labels]


# -- the grouping ----------------------------------------------------------------------
def find_near_duplicates(
    vectors: np.ndarray,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    file_sha256: np.ndarray | None = None,
    sources: np.ndarray | None = None,
    views: np.ndarray | None = None,
    keep: str = "first",
    sizes: SizeInput = None,
    near: bool = True,
    batch_size: int = 4096,
    device: str = "cpu",
    backend: str = "faiss",
    pairs: Callable[..., Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]] | None = None,
) -> NearDuplicates:
    """Exact- and near-duplicate groups of sources, with one representative each.

    ``keep``: ``first`` (lowest row id), ``largest`` or ``best`` (largest ``sizes``: an
    (N,) float array, NaN where unknown, or a function from item ids to such an array,
    called only for items that have a duplicate; ties by lowest id; ``best`` is the name
    under which :mod:`pairkit.mine.dedup` passes its pixels/bytes/path order) or
    ``central`` (highest mean similarity to the other members of its component).
    ``near=False`` finds only exact duplicates by hash. ``device`` (``cpu``,
    ``cuda``, ``cuda:N`` or ``auto``) and ``backend`` (``faiss``, ``torch`` or ``auto``)
    choose where the range search runs. ``pairs``: the function that streams the pairs
    at the threshold, with the signature of
    :func:`pairkit.index.range_search.range_search_blocks` (its default; the Ray path
    passes one that searches blocks of queries on a cluster: the pairs, and so the groups,
    are the same). See :class:`NearDuplicates`.
    """
    import pandas as pd

    from pairkit.index.range_search import range_search_blocks

    t = check_threshold(threshold)
    t32 = np.float32(t)
    if keep not in KEEP_RULES:
        raise UsageError(f"--keep must be one of {', '.join(KEEP_RULES)}, got {keep}")
    if keep in ("best", "largest") and sizes is None:
        raise UsageError(f"keep rule {keep!r} needs sizes")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise PairkitError(f"vectors must be 2-d (N, d), got shape {vectors.shape}")
    n = len(vectors)
    for name, arr in (("file_sha256", file_sha256), ("sources", sources), ("views", views)):
        if arr is not None and len(arr) != n:
            raise PairkitError(f"{name} has {len(arr)} entries, vectors {n}")

    # 1. sources -> nodes (one per source, its lowest view)
    if sources is None:
        item_node = np.arange(n, dtype=np.int64)
        node_item = np.arange(n, dtype=np.int64)
    else:
        codes, _ = pd.factorize(pd.Series(np.asarray(sources, dtype=object)))
        item_node = codes.astype(np.int64)
        view_key = (
            np.arange(n) if views is None else np.asarray(views, dtype=np.int64)
        )
        order = np.lexsort((np.arange(n), view_key, item_node))
        first = np.ones(n, dtype=bool)
        first[1:] = item_node[order][1:] != item_node[order][:-1]
        node_item = order[first].astype(np.int64)  # node s -> its row, nodes in code order
    n_nodes = len(node_item)

    # 2. exact duplicates: nodes with one file hash form one unit
    if file_sha256 is not None:
        hashes = np.asarray(file_sha256, dtype=object)[node_item]
        as_series = pd.Series(hashes, dtype=object)
        empty = as_series.map(lambda h: isinstance(h, str) and not h)
        missing = (as_series.isna() | empty).to_numpy(dtype=bool)
        keys = np.where(missing, None, hashes)
        codes, _ = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=True)
        node_unit = np.empty(n_nodes, dtype=np.int64)
        n_hash = int(codes.max()) + 1 if (codes >= 0).any() else 0
        node_unit[~missing] = codes[~missing]
        node_unit[missing] = n_hash + np.arange(int(missing.sum()))
    else:
        node_unit = np.arange(n_nodes, dtype=np.int64)
    n_units = int(node_unit.max()) + 1 if n_nodes else 0
    # The unit's vector is its first node's vector.
    unit_node = np.full(n_units, n_nodes, dtype=np.int64)
    np.minimum.at(unit_node, node_unit, np.arange(n_nodes, dtype=np.int64))
    unit_vecs = vectors[node_item[unit_node]] if n_units else vectors[:0]
    unit_nodes_count = np.bincount(node_unit, minlength=n_units)

    # 3. near duplicates: connected components of units, streamed
    labels = np.arange(n_units, dtype=np.int64)
    if near and n_units > 1:
        for a, b, _ in (pairs or range_search_blocks)(
            unit_vecs, unit_vecs, t, batch_size=batch_size, device=device, backend=backend
        ):
            upper = b > a
            labels = _merge_edges(labels, a[upper], b[upper])

    comp_size = np.bincount(labels, minlength=n_units)
    candidate_unit = (comp_size[labels] > 1) | (unit_nodes_count > 1)
    candidate_nodes = np.nonzero(candidate_unit[node_unit])[0]

    # Priority of a node: lower is better (keep rule); central is per component.
    rank = np.full(n_nodes, np.inf)
    rule = keep
    if keep in ("first", "central"):
        rank[candidate_nodes] = node_item[candidate_nodes]
    else:
        items = node_item[candidate_nodes]
        got = sizes(items) if callable(sizes) else np.asarray(sizes, dtype=float)[items]
        got = np.asarray(got, dtype=float)
        if np.isnan(got).any():
            raise PairkitError(
                f"keep rule {keep!r}: size unknown for {int(np.isnan(got).sum())} items"
            )
        # Larger first; ties by lowest id: rank by (-size, id).
        order = np.lexsort((items, -got))
        rank[candidate_nodes[order]] = np.arange(len(order), dtype=float)

    # best node of each unit and its rank
    unit_best = np.full(n_units, -1, dtype=np.int64)
    unit_rank = np.full(n_units, np.inf)
    cand_order = candidate_nodes[np.argsort(rank[candidate_nodes], kind="stable")]
    units_seen, first_pos = np.unique(node_unit[cand_order], return_index=True)
    unit_best[units_seen] = cand_order[first_pos]  # best rank comes first in cand_order
    unit_rank[units_seen] = rank[cand_order[first_pos]]

    # 4. chain guard: split each component greedily around representatives
    groups: list[tuple[int, np.ndarray]] = []  # (leader unit, member units)
    split = 0
    cand_units = np.nonzero(candidate_unit)[0]
    comp_order = np.argsort(labels[cand_units], kind="stable")
    sorted_units = cand_units[comp_order]
    bounds = np.flatnonzero(np.diff(labels[sorted_units])) + 1
    for comp in np.split(sorted_units, bounds):
        if len(comp) == 0:
            continue
        remaining = comp
        made = covered = 0
        while len(remaining):
            vecs = unit_vecs[remaining]
            if rule == "central" and len(remaining) > 1:
                total = vecs.sum(axis=0)
                own = np.einsum("ij,ij->i", vecs, vecs)
                centrality = (vecs @ total - own) / (len(remaining) - 1)
                # highest centrality, ties by lowest id
                lead_pos = int(np.lexsort((unit_rank[remaining], -centrality))[0])
            else:
                lead_pos = int(np.argmin(unit_rank[remaining]))
            leader = remaining[lead_pos]
            sims = vecs @ unit_vecs[leader]
            inside = sims >= t32
            inside[lead_pos] = True
            members = remaining[inside]
            if len(members) > 1 or unit_nodes_count[leader] > 1:
                groups.append((int(leader), members))
                made += 1
                covered += len(members)
            remaining = remaining[~inside]
        if len(comp) > 1 and (made != 1 or covered != len(comp)):
            split += 1

    # 5. table: one row per grouped source
    unit_members = _members_by_unit(node_unit, n_units)
    rows_group, rows_node, rows_keep, rows_sim, rows_match = [], [], [], [], []
    reps = []
    for leader, members in groups:
        rep = int(unit_best[leader])
        nodes = np.concatenate([unit_members[u] for u in members])
        reps.append((int(node_item[rep]), rep, nodes))
    reps.sort(key=lambda r: r[0])
    for gid, (rep_item, rep, nodes) in enumerate(reps):
        items = node_item[nodes]
        sims = vectors[items] @ vectors[rep_item]
        is_rep = nodes == rep
        same_unit = node_unit[nodes] == node_unit[rep]
        order = np.lexsort((items, ~is_rep))
        rows_group.append(np.full(len(nodes), gid, dtype=np.int64))
        rows_node.append(nodes[order])
        rows_keep.append(is_rep[order])
        # float16-stored rows have norms within ~1e-3 of 1: keep scores in [-1, 1]
        sims = np.clip(sims.astype(np.float32), -1.0, 1.0)
        sims[is_rep] = np.float32(1.0)
        rows_sim.append(sims[order])
        rows_match.append(
            np.where(is_rep, "keep", np.where(same_unit, "exact", "near"))[order].astype(object)
        )
    if reps:
        node_ids = np.concatenate(rows_node)
        table = pd.DataFrame(
            {
                "group": np.concatenate(rows_group),
                "id": node_item[node_ids],
                "keep": np.concatenate(rows_keep),
                "similarity": np.concatenate(rows_sim),
                "match": np.concatenate(rows_match),
            }
        )
        node_group = np.full(n_nodes, -1, dtype=np.int64)
        node_group[node_ids] = table["group"].to_numpy()
    else:
        table = pd.DataFrame(
            {
                "group": np.zeros(0, np.int64),
                "id": np.zeros(0, np.int64),
                "keep": np.zeros(0, bool),
                "similarity": np.zeros(0, np.float32),
                "match": np.zeros(0, object),
            }
        )
        node_group = np.full(n_nodes, -1, dtype=np.int64)
    item_group = node_group[item_node] if n else np.zeros(0, np.int64)
    return NearDuplicates(item_group.astype(np.int64), table, split, rule)


def _members_by_unit(node_unit: np.ndarray, n_units: int) -> list[np.ndarray]:
    """Nodes of each unit, ascending: a list of n_units int64 arrays."""
    order = np.argsort(node_unit, kind="stable")
    counts = np.bincount(node_unit, minlength=n_units)
    return np.split(order.astype(np.int64), np.cumsum(counts)[:-1])
