"""Benchmark: label-free false-negative detectors on real images and real encoders.

Data and encoders ship inside packages (tests/benchmarks/real_data.py): Fashion-MNIST,
MNIST, scikit-learn's digits; ImageNet-trained EfficientNet-Lite0/1/2. Each set is
written as an image folder (one sub-folder per class) and embedded by the user path,
``pairkit embed --model timm/tf_efficientnet_liteN --checkpoint FILE --views 2
--labels folder`` (cached in ``--work``).

Mining is ``pairkit mine --hard --relation instance -k 5`` (in-process
``mine_store``; every item is an anchor, its positive the other view); the labels are
hidden from every detector except the ``label`` row. Per method:

- ``fn``: share of mined negatives of the anchor's class (the false negatives);
- ``useful``: negatives per anchor of another class from the anchor's coarse
  category (the useful hard ones: shirt for a T-shirt, 3 for a 5);
- ``coarse``: the share of the true negatives (another class) from the anchor's coarse
  category (how hard the negatives the method keeps are);
- ``s``: seconds of the whole mining call (setup, rules, search, table), and
  ``x naive``: that time over naive mining's in the same run.

Detectors that are measured but not shipped as rules (they did not earn a place)
are implemented here: k-reciprocal nearest neighbours and k-reciprocal Jaccard
distance (Zhong et al., CVPR 2017), DBSCAN on that distance (as unsupervised
re-identification pseudo-labelling does), and a rank window (skip the first 20).

``--train`` adds the downstream proof: heads trained (``pairkit train``, InfoNCE,
MLP 1280->128) on (a) in-batch negatives only, (b) naive mined, (c) label-free
filtered, (d) label-filtered negatives, evaluated on a held-out split with
``pairkit eval HELDOUT --against TRAIN --head HEAD``: kNN top-1 and linear probe.

    .venv/bin/python tests/benchmarks/false_negatives_real.py --work /tmp/fnreal \\
        [--sets fm0,...] [--train] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.real_data import (  # noqa: E402
    SETS,
    encoder_checkpoint,
    sample,
    sample_tail,
    write_folder,
)

K = 5


@dataclass(frozen=True)
class Config:
    """One (data set, size, seed, encoder) combination."""

    tag: str
    data: str
    sources: int
    seed: int
    lite: int
    invert: bool = False
    heldout: int = 0  # sources of a disjoint held-out split (one view) for --train
    tail: float = 0.0  # > 0: long-tailed class sizes this many times apart, both splits
    image_size: int = 0  # > 0: embed --image-size (the encoder's input side); 0: its own


def size_args(cfg: Config) -> list[str]:
    """``embed``'s ``--image-size`` for ``cfg`` (none at the encoder's own size): every
    store of one set is embedded at one size."""
    return ["--image-size", str(cfg.image_size)] if cfg.image_size else []


CONFIGS = {
    "fm0": Config("fm0", "fashion-mnist", 4000, 0, 0, heldout=2000),
    "fm1-inv": Config("fm1-inv", "fashion-mnist", 4000, 1, 0, invert=True),
    "fm2-lite2": Config("fm2-lite2", "fashion-mnist", 2000, 2, 2),
    "mnist5k": Config("mnist5k", "mnist-5k", 4000, 0, 0, heldout=1000),
    "mnist10k-inv-lite1": Config("mnist10k-inv-lite1", "mnist-10k", 2000, 1, 1, invert=True),
    "digits": Config("digits", "digits", 1797, 0, 0),
}
# a 20-class set: the union of two stores made with the same encoder
UNIONS = {"fm0+mnist5k": ("fm0", "mnist5k")}


# -- data -----------------------------------------------------------------------------
def pairkit(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pairkit", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=ROOT)


def prepare(cfg: Config, work: Path) -> tuple[Path, Path | None]:
    """Write and embed the set (cached); returns (store, held-out store or None)."""
    data = SETS[cfg.data]()
    rows = (sample_tail(data, cfg.sources, cfg.seed, cfg.tail) if cfg.tail
            else sample(data, cfg.sources, cfg.seed))
    folder = work / cfg.tag
    ckpt = encoder_checkpoint(cfg.lite)
    model = f"timm/tf_efficientnet_lite{cfg.lite}"
    if not (folder / "images").exists():
        write_folder(data, rows, folder / "images", invert=cfg.invert)
    size = size_args(cfg)
    pairkit("embed", str(folder / "images"), "-o", str(folder / "store"), "--model", model,
            "--checkpoint", ckpt, "--views", "2", "--labels", "folder", "--seed",
            str(cfg.seed), "--quiet", *size)
    held = None
    if cfg.heldout:
        used = set(rows.tolist())
        pool = np.array([i for i in range(len(data.images)) if i not in used])
        rng = np.random.default_rng(100 + cfg.seed)
        test_rows = (sample_tail(data, cfg.heldout, cfg.seed, cfg.tail, exclude=rows)
                     if cfg.tail else np.sort(rng.choice(pool, size=cfg.heldout, replace=False)))
        if not (folder / "heldout-images").exists():
            write_folder(data, test_rows, folder / "heldout-images", invert=cfg.invert)
        held = folder / "heldout"
        pairkit("embed", str(folder / "heldout-images"), "-o", str(held), "--model", model,
                "--checkpoint", ckpt, "--views", "1", "--labels", "folder", "--quiet", *size)
    return folder / "store", held


# -- detectors measured here only ------------------------------------------------------
def kreciprocal_sets(vectors: np.ndarray, sources: np.ndarray, k: int) -> Any:
    """R*(p, k) of Zhong et al. 2017 as a sparse bool (N, N): mutual k-NN, expanded by
    the k/2-reciprocal sets of members that share more than 2/3 of theirs."""
    from scipy import sparse

    from pairkit.mine.clusters import knn_graph

    n = len(vectors)
    ids, _ = knn_graph(vectors, sources, k)
    rows = np.repeat(np.arange(n), k)

    def mutual(kk: int) -> Any:
        keep = (np.tile(np.arange(k), n) < kk) & (ids.ravel() >= 0)
        a = sparse.csr_matrix((np.ones(keep.sum(), bool), (rows[keep], ids.ravel()[keep])),
                              shape=(n, n))
        return a.multiply(a.T).tocsr()

    r, r2 = mutual(k), mutual(max(1, k // 2))
    overlap = (r.astype(np.float32) @ r2.T.astype(np.float32)).tocsr()
    size2 = np.asarray(r2.sum(axis=1)).ravel()
    pr, pc = r.nonzero()
    ok = np.asarray(overlap[pr, pc]).ravel() > 2 / 3 * size2[pc]
    expand = sparse.csr_matrix((np.ones(ok.sum(), np.float32), (pr[ok], pc[ok])), shape=(n, n))
    return ((r.astype(np.float32) + expand @ r2.astype(np.float32)) > 0).tocsr()


def jaccard(vectors: np.ndarray, rstar: Any) -> Any:
    """Sparse (N, N) k-reciprocal Jaccard similarity sum(min(V_p, V_g)) / sum(max(...))
    with V_p,g = exp(-||p - g||^2) on R*(p) (Zhong et al. 2017, without query expansion)."""
    from scipy import sparse

    n = rstar.shape[0]
    r, c = rstar.nonzero()
    w = np.exp(-(2.0 - 2.0 * np.einsum("nd,nd->n", vectors[r], vectors[c])))
    v = sparse.csr_matrix((w, (r, c)), shape=(n, n))
    v = sparse.diags(1.0 / np.maximum(np.asarray(v.sum(axis=1)).ravel(), 1e-12)) @ v
    v = v.tocsc()
    pr, pc, pv = [], [], []
    for j in range(n):  # pairs sharing column j contribute min(V_pj, V_gj)
        lo, hi = v.indptr[j], v.indptr[j + 1]
        if hi - lo < 2:
            continue
        idx, val = v.indices[lo:hi], v.data[lo:hi]
        a, b = np.meshgrid(np.arange(hi - lo), np.arange(hi - lo), indexing="ij")
        pr.append(idx[a.ravel()])
        pc.append(idx[b.ravel()])
        pv.append(np.minimum(val[a.ravel()], val[b.ravel()]))
    mins = sparse.csr_matrix((np.concatenate(pv), (np.concatenate(pr), np.concatenate(pc))),
                             shape=(n, n))
    mins.sum_duplicates()
    r, c = mins.nonzero()
    mn = np.asarray(mins[r, c]).ravel()
    total = np.asarray(v.sum(axis=1)).ravel()
    return sparse.csr_matrix((mn / (total[r] + total[c] - mn), (r, c)), shape=(n, n))


def sparse_flags(matrix: Any, threshold: float | None = None) -> Any:
    """fn_filter flagging candidate c of anchor a when matrix[a, c] (> 0, or >= threshold)."""

    def fn_filter(a, c, s, r, pos):  # noqa: ANN001, ANN202
        safe = np.maximum(c, 0)
        vals = np.asarray(matrix[np.repeat(a, c.shape[1]), safe.ravel()]).reshape(c.shape)
        hit = vals > 0 if threshold is None else vals >= threshold
        flags = hit & (c >= 0)
        return flags, np.where(flags, "detector", None)

    return fn_filter


def label_flags(labels: np.ndarray) -> Any:
    def fn_filter(a, c, s, r, pos):  # noqa: ANN001, ANN202
        same = (labels[np.maximum(c, 0)] == labels[a][:, None]) & (c >= 0)
        return same, np.where(same, "label", None)

    return fn_filter


# -- one mining run -----------------------------------------------------------------------
def mine(store: Any, method: str, spec: Any) -> tuple[Any, float, dict]:
    """Run one method; returns ((anchor ids, negative ids), seconds, mine's stats)."""
    from pairkit.core.relations import load_relation
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.hard_negatives import mine_negatives

    cfg = MineConfig(num_negatives=K, hard=True, range_min=spec.get("range_min", 0))
    t0 = time.perf_counter()
    if "rules" in spec or spec.get("naive"):
        fcfg = None if spec.get("naive") else FalseNegativeConfig(
            rules=tuple(spec["rules"]), **spec.get("params", {}))
        table, stats = mine_store(store, "instance", cfg, None, fcfg)
        pairs = (table["anchor_id"].to_numpy(), table["negative_id"].to_numpy())
        return pairs, time.perf_counter() - t0, stats
    from pairkit.index.open import open_searcher
    from pairkit.index.options import IndexOptions

    vectors = store.vectors(np.float32)
    sources = store.source_codes()
    rel = load_relation("instance", store.items)
    searcher = open_searcher(vectors, IndexOptions(kind="auto", device="cpu")).search
    fn_filter = spec["filter"](store, vectors, sources)
    p = mine_negatives(vectors, sources, rel, cfg, searcher, fn_filter).pairs
    ok = p.neg_ids >= 0
    pairs = (np.broadcast_to(p.anchors[:, None], ok.shape)[ok], p.neg_ids[ok])
    return pairs, time.perf_counter() - t0, {}


def quality(pairs: tuple[np.ndarray, np.ndarray], labels: np.ndarray,
            coarse: np.ndarray, anchors: int) -> dict:
    """fn share, useful hard negatives per anchor, negatives per anchor."""
    a, n = pairs
    keep = n >= 0
    a, n = a[keep], n[keep]
    same = labels[a] == labels[n]
    useful = (~same) & (coarse[a] == coarse[n])
    return {"fn": round(float(same.mean()), 4),
            "useful": round(float(useful.sum() / max(anchors, 1)), 3),
            "coarse": round(float(useful.sum() / max(int((~same).sum()), 1)), 4),
            "negs_per_anchor": round(float(len(n) / max(anchors, 1)), 3)}


def kmeans_votes(sizes: tuple[int, ...] | None, runs: int, votes: int) -> Any:
    """k-means on the raw vectors (the cluster rule before the spectral embedding):
    ``sizes`` = wanted cluster sizes, one granularity each; None = one k read off the
    kNN graph's spectrum, as the cluster rule does."""

    def make(store, v, s):  # noqa: ANN001, ANN202
        from pairkit.index.kmeans import spherical_kmeans
        from pairkit.mine.clusters import cluster_counts
        from pairkit.mine.spectral import spectral_embedding

        if sizes is None:
            ks = (spectral_embedding(v, s).cluster_count(),)
        else:
            ks = cluster_counts(len(v), sizes)
        assign = np.stack([spherical_kmeans(v, k, seed=7919 * g + r)[0]
                           for g, k in enumerate(ks) for r in range(runs)])

        def fn_filter(a, c, sc, r, pos):  # noqa: ANN001, ANN202
            got = np.zeros(c.shape, np.int32)
            for row in assign:
                got += row[np.maximum(c, 0)] == row[a][:, None]
            flags = (got >= votes) & (c >= 0)
            return flags, np.where(flags, "kmeans", None)

        return fn_filter

    return make


def fnc_support(threshold: float | None, top: int = 0) -> Any:
    """False-negative cancellation (Huynh et al., WACV 2022), the former ``support`` rule
    (removed from pairkit: docs/benchmarks.md): a candidate is flagged when its highest
    similarity to the anchor's support views (every view of its source) is >= ``threshold``
    (None: the anchor's weakest positive score) and, with ``top``, among the anchor's
    ``top`` highest by it."""

    def make(store, v, s):  # noqa: ANN001, ANN202
        views_of = {}
        for row, src in enumerate(s):
            views_of.setdefault(int(src), []).append(row)
        width = max(len(x) for x in views_of.values())
        table = np.full((int(s.max()) + 1, width), -1, np.int64)
        for src, rows in views_of.items():
            table[src, : len(rows)] = rows

        def fn_filter(a, c, sc, r, pos):  # noqa: ANN001, ANN202
            from pairkit.mine.fn_context import similarity_to_rows

            views = table[s[a]]
            sim = similarity_to_rows(v, views, c)  # (n, m, k)
            agg = np.where((views >= 0)[:, :, None], sim, -np.inf).max(axis=1)
            if threshold is None:
                p = np.asarray(r, dtype=np.float32)[:, None]
                thr = np.where(np.isfinite(p), p, np.inf)
            else:
                thr = np.float32(threshold)
            flags = (c >= 0) & (agg >= thr)
            if top and top < c.shape[1]:
                flags &= agg >= -np.partition(-agg, top - 1, axis=1)[:, top - 1 : top]
            return flags, np.where(flags, "support", None)

        return fn_filter

    return make


def methods() -> dict[str, dict]:
    def kr(k: int) -> Any:
        return lambda st, v, s: sparse_flags(kreciprocal_sets(v, s, k))

    def kr_jaccard(k: int, t: float) -> Any:
        return lambda st, v, s: sparse_flags(jaccard(v, kreciprocal_sets(v, s, k)), t)

    def dbscan(k: int, eps: float) -> Any:
        def make(st, v, s):  # noqa: ANN001, ANN202
            from sklearn.cluster import DBSCAN

            dist = jaccard(v, kreciprocal_sets(v, s, k))
            dist.data = np.clip(1.0 - dist.data, 0.0, 1.0)
            lab = DBSCAN(eps=eps, min_samples=4, metric="precomputed").fit_predict(dist)
            lab = np.where(lab >= 0, lab, -np.arange(1, len(lab) + 1))

            def fn_filter(a, c, sc, r, pos):  # noqa: ANN001, ANN202
                flags = (lab[np.maximum(c, 0)] == lab[a][:, None]) & (c >= 0)
                return flags, np.where(flags, "dbscan", None)

            return fn_filter

        return make

    return {
        "naive": {"naive": True},
        "rank window (skip 20)": {"naive": True, "range_min": 20},
        "k-reciprocal set (k=20)": {"filter": kr(20)},
        "k-reciprocal Jaccard >= 0.1 (k=20)": {"filter": kr_jaccard(20, 0.1)},
        "DBSCAN on k-reciprocal Jaccard (eps 0.7)": {"filter": dbscan(20, 0.7)},
        "margin 0.95 (NV-Retriever)": {"rules": ["margin"]},
        "support (FNC, max >= the anchor's positive: the default)": {
            "filter": fnc_support(None)},
        "support (FNC, max >= 0.9)": {"filter": fnc_support(0.9)},
        "support (FNC, top 5)": {"filter": fnc_support(-1.0, top=5)},
        "community": {"rules": ["community"]},
        "near-duplicate,community (old default)": {"rules": ["near-duplicate", "community"]},
        "k-means on the vectors, 3 granularities, 2 votes (old cluster rule)": {
            "filter": kmeans_votes(sizes=(64, 128, 256), runs=1, votes=2)},
        "k-means on the vectors, 8 runs, any vote (k from the graph)": {
            "filter": kmeans_votes(sizes=None, runs=8, votes=1)},
        "cluster, one run": {"rules": ["cluster"],
                             "params": {"cluster_runs": 1, "cluster_diffusion": 0.0}},
        "cluster (spectral, 8 runs, any vote)": {
            "rules": ["cluster"], "params": {"cluster_votes": 1, "cluster_diffusion": 0.0}},
        "near-duplicate,cluster (votes 2 of 8)": {
            "rules": ["near-duplicate", "cluster"], "params": {"cluster_diffusion": 0.0}},
        "label-free, votes 2 of 8 (the default 2026-12-01 to 12-05)": {
            "rules": ["near-duplicate", "mutual-neighbour", "cluster"],
            "params": {"cluster_diffusion": 0.0}},
        "label-free default (8 of 8 runs or diffusion cosine >= 0.5)": {
            "rules": ["near-duplicate", "mutual-neighbour", "cluster"]},
        "label-free, diffusion cosine >= 0.4": {
            "rules": ["near-duplicate", "mutual-neighbour", "cluster"],
            "params": {"cluster_diffusion": 0.4}},
        "label-free, diffusion cosine >= 0.6": {
            "rules": ["near-duplicate", "mutual-neighbour", "cluster"],
            "params": {"cluster_diffusion": 0.6}},
        "label (labels visible)": {"rules": ["label"]},
    }


def coarse_of(labels: np.ndarray) -> np.ndarray:
    """Coarse category of each label (Fashion-MNIST families, digit stroke groups)."""
    from tests.benchmarks.real_data import DIGIT_COARSE, FASHION_COARSE

    def one(label: str) -> str:
        label = str(label).split("::")[-1]  # union stores prefix the set's tag
        if label in FASHION_COARSE:
            return "fashion:" + FASHION_COARSE[label]
        return "digit:" + DIGIT_COARSE[label]

    return np.array([one(x) for x in labels], dtype=object)


def write_union(out: Path, parts: dict[str, Path], encoder: dict) -> None:
    """Write to ``out`` a store holding the rows of ``parts`` (tag -> store path, one
    encoder), paths, sources and labels prefixed by their tag."""
    import pandas as pd

    from pairkit.core.store import Store
    from pairkit.core.store_writer import write_store

    vecs, items = [], []
    for tag, store_path in parts.items():
        st = Store.open(store_path)
        vecs.append(st.vectors(np.float32))
        it = st.items[["path", "source", "view", "label"]].copy()
        for col in ("path", "source"):
            it[col] = tag + "/" + it[col].astype(str)
        it["label"] = tag + "::" + it["label"].astype(str)
        items.append(it)
    write_store(out, np.concatenate(vecs), pd.concat(items, ignore_index=True),
                encoder=encoder)


def union_store(tags: tuple[str, ...], work: Path) -> Path:
    """A store holding the rows of several (same-encoder) stores, labels prefixed by tag."""
    out = work / "+".join(tags) / "store"
    if (out / "manifest.json").exists():
        return out
    write_union(out, {tag: prepare(CONFIGS[tag], work)[0] for tag in tags},
                {"name": "union of " + ", ".join(tags)})
    return out


def run_store(tag: str, store_path: Path, only: set[str] | None) -> list[dict]:
    import pandas as pd

    from pairkit.core.store import Store

    store = Store.open(store_path)
    labels = store.labels()
    codes, _ = pd.factorize(pd.Series(labels, dtype=object))
    coarse_codes, _ = pd.factorize(pd.Series(coarse_of(labels)))
    rows = []
    naive_s = None
    for name, spec in methods().items():
        if only and name not in only and name != "naive":
            continue
        pairs, seconds, stats = mine(store, name, spec)
        if name == "naive":
            naive_s = seconds
        q = quality(pairs, codes, coarse_codes, store.count)
        row = {"set": tag, "items": int(store.count), "method": name, **q,
               "seconds": round(seconds, 2),
               "x_naive": round(seconds / naive_s, 2) if naive_s else None}
        if stats.get("clusters"):
            row["clusters_k"] = stats["clusters"].get("k")
        if stats.get("fn_estimate"):
            row["estimate"] = stats["fn_estimate"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


# -- downstream: heads trained on each kind of negatives --------------------------------
TRAIN_VARIANTS = {
    "(a) in-batch negatives only": None,
    "(b) naive mined negatives": [],
    "(c) label-free filtered (near-duplicate,cluster)": ["--filter-false-negatives",
                                                          "--fn-rules", "near-duplicate,cluster"],
    "(d) label-filtered": ["--filter-false-negatives", "--fn-rules", "label"],
}


def train_proof(cfg: Config, work: Path, seeds: tuple[int, ...] = (0, 1, 2),
                epochs: int = 10) -> list[dict]:
    """Heads (a)-(d) for each training seed; held-out kNN top-1 and linear probe."""
    store, held = prepare(cfg, work)
    assert held is not None, f"{cfg.tag} has no held-out split"
    out = work / cfg.tag / "train"
    out.mkdir(parents=True, exist_ok=True)
    raw = json.loads(pairkit("eval", str(store), "--against", str(held), "--json",
                             "--metrics", "knn,linear", "-q").stdout)
    rows = [{"set": cfg.tag, "variant": "raw embeddings (no head)", "seed": None,
             "knn_top1": raw["knn_top1"], "linear_top1": raw["linear_top1"]}]
    print(json.dumps(rows[0]), flush=True)
    for name, mine_args in TRAIN_VARIANTS.items():
        slug = name.split(")")[0].strip("(")
        pairs = None
        if mine_args is not None:
            pairs = out / f"pairs-{slug}.parquet"
            pairkit("mine", str(store), "--hard", "--relation", "instance", "-k", str(K),
                    "-o", str(pairs), "--force", "-q", *mine_args)
        for seed in seeds:
            head = out / f"head-{slug}-{seed}"
            args = ["train", str(store), "-o", str(head), "--force", "-q", "--seed", str(seed),
                    "--epochs", str(epochs)]
            args += ["--relation", "instance"] if pairs is None else ["--pairs", str(pairs)]
            pairkit(*args)
            got = json.loads(pairkit("eval", str(store), "--against", str(held), "--head",
                                     str(head), "--json", "--metrics", "knn,linear",
                                     "-q").stdout)
            row = {"set": cfg.tag, "variant": name, "seed": seed,
                   "knn_top1": got["knn_top1"], "linear_top1": got["linear_top1"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    sets = list(dict.fromkeys(r["set"] for r in rows))
    names = list(dict.fromkeys(r["method"] for r in rows))
    head = "| method | " + " | ".join(sets) + " |"
    lines = [head, "|---|" + "---|" * len(sets)]
    for name in names:
        cells = []
        for s in sets:
            r = next((r for r in rows if r["set"] == s and r["method"] == name), None)
            cells.append("" if r is None else f"{r['fn']:.3f} / {r['useful']:.2f} / "
                         f"{r.get('coarse', float('nan')):.3f} / {r['x_naive']:.1f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="cache of images and stores")
    ap.add_argument("--sets", default=",".join([*CONFIGS, *UNIONS]),
                    help="comma list of " + ", ".join([*CONFIGS, *UNIONS]))
    ap.add_argument("--methods", default="", help="';'-separated method names (default all)")
    ap.add_argument("--train", default="", help="comma list of sets for the downstream proof")
    ap.add_argument("--out", type=Path, help="write all rows as JSON")
    args = ap.parse_args()
    only = {m.strip() for m in args.methods.split(";") if m.strip()} or None
    rows: list[dict] = []
    for tag in [t for t in args.sets.split(",") if t]:
        if tag in UNIONS:
            rows += run_store(tag, union_store(UNIONS[tag], args.work), only)
        else:
            store, _ = prepare(CONFIGS[tag], args.work)
            rows += run_store(tag, store, only)
    train_rows: list[dict] = []
    for tag in [t for t in args.train.split(",") if t]:
        train_rows += train_proof(CONFIGS[tag], args.work)
    if rows:
        print(markdown(rows))
    if args.out:
        args.out.write_text(json.dumps({"mining": rows, "training": train_rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
