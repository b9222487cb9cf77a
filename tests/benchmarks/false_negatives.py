"""Benchmark: false-negative rules in hard-negative mining, measured with hidden labels.

Data
- synthetic: a class hierarchy (superclasses holding 2-6 classes of unequal
  size, lognormal), two views per source, for several seeds and sizes;
- digits: scikit-learn's 8x8 digits rendered to PNG (upscaled to 32x32) and
  embedded by ``pairkit embed --model pixels --views 2``; superclasses are
  groups of digits that the pixels encoder confuses (read off the
  nearest-other-class confusion counts once, then fixed): {3,5,7,9},
  {1,2,8}, {0,4,6}.

Mining (done here with ``pairkit.index.search.knn_search``): every item is an
anchor; its candidates are its ``--pool`` nearest rows minus its own source;
a method flags candidates; the first 5 unflagged candidates are its negatives.
Naive top-k searches only 5 + views neighbours and flags nothing. Labels are
never shown to the miner except in the row "label (labels visible)".

Metrics over all kept negatives: fn_rate (same class as the anchor),
true_hard (same superclass, other class), mean negative score, negatives per
anchor, seconds (search + context + flags + selection).

    .venv/bin/python tests/benchmarks/false_negatives.py [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pairkit.index.search import knn_search  # noqa: E402
from pairkit.mine.false_negatives import (  # noqa: E402
    DEFAULT_RULES,
    FalseNegativeConfig,
    build_context,
    flag_false_negatives,
)
from pairkit.mine.fn_context import source_views  # noqa: E402

NEGATIVES = 5


# -- data -----------------------------------------------------------------------------
def synthetic(n_sources: int, seed: int, dim: int = 64, views: int = 2) -> dict:
    """Hierarchical clustered unit vectors. Returns dict of vectors (N, dim) float32,
    sources, classes, supers (int64 (N,))."""
    rng = np.random.default_rng(seed)
    mean_class = 25  # sources per class, on average
    n_draw = max(4, n_sources // mean_class)
    # lognormal sizes (sigma 1: the largest class ~20x the smallest), mean `mean_class`
    sizes = np.maximum(2, rng.lognormal(np.log(mean_class) - 0.5, 1.0, size=n_draw))
    sizes = np.round(sizes * n_sources / sizes.sum()).astype(int)
    sizes = sizes[sizes >= 2]
    n_classes = len(sizes)
    # superclasses holding 2..6 classes
    supers_of_class = []
    s = 0
    while len(supers_of_class) < n_classes:
        supers_of_class += [s] * int(rng.integers(2, 7))
        s += 1
    supers_of_class = np.array(supers_of_class[:n_classes])
    n_super = supers_of_class.max() + 1

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    super_c = unit(rng.normal(size=(n_super, dim)))
    spread_super = rng.uniform(0.5, 0.9, size=n_super)  # class-centre spread in a superclass
    class_c = unit(
        super_c[supers_of_class]
        + spread_super[supers_of_class, None] * unit(rng.normal(size=(n_classes, dim)))
    )
    spread_class = rng.uniform(0.6, 1.0, size=n_classes)  # source spread in a class
    cls = np.repeat(np.arange(n_classes), sizes)
    src_vec = unit(class_c[cls] + spread_class[cls, None] * unit(rng.normal(size=(len(cls), dim))))
    view_vec = unit(
        np.repeat(src_vec, views, axis=0)
        + 0.35 * unit(rng.normal(size=(len(cls) * views, dim)))
    )
    order = rng.permutation(len(view_vec))  # rows in no meaningful order
    sources = np.repeat(np.arange(len(cls)), views)[order]
    classes = np.repeat(cls, views)[order]
    return {
        "vectors": view_vec[order].astype(np.float32),
        "sources": sources.astype(np.int64),
        "classes": classes.astype(np.int64),
        "supers": supers_of_class[classes].astype(np.int64),
    }


DIGIT_SUPERS = {3: 0, 5: 0, 7: 0, 9: 0, 1: 1, 2: 1, 8: 1, 0: 2, 4: 2, 6: 2}


def digits(cache: Path) -> dict:
    """scikit-learn digits, embedded with the offline ``pixels`` encoder (2 views)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    from pairkit.core.store import Store

    store_dir = cache / "digits-store"
    if not (store_dir / "manifest.json").exists():
        images = cache / "digits-images"
        data = load_digits()
        for i, (img, y) in enumerate(zip(data.images, data.target, strict=True)):
            folder = images / str(int(y))
            folder.mkdir(parents=True, exist_ok=True)
            arr = (255 - img * 255 / 16).clip(0, 255).astype(np.uint8)
            Image.fromarray(arr).resize((32, 32), Image.BILINEAR).save(folder / f"{i:04d}.png")
        cmd = [str(ROOT / ".venv/bin/pairkit"), "embed", str(images), "-o", str(store_dir),
               "--model", "pixels", "--views", "2", "--labels", "folder", "--quiet",
               "--dtype", "float32", "--force"]
        subprocess.run(cmd, check=True, cwd=ROOT)
    store = Store.open(store_dir)
    labels = store.labels()
    classes = np.array([int(x) for x in labels], dtype=np.int64)
    return {
        "vectors": store.vectors(np.float32),
        "sources": store.source_codes(),
        "classes": classes,
        "supers": np.array([DIGIT_SUPERS[c] for c in classes], dtype=np.int64),
        "labels": labels,
    }


# -- mining ---------------------------------------------------------------------------
def candidates(vectors: np.ndarray, sources: np.ndarray, pool: int, views: int):
    """Search ``pool + views`` neighbours, drop own source, keep order.
    Returns (ids (N, pool) -1 padded, scores (N, pool))."""
    scores, ids = knn_search(vectors, vectors, pool + views)
    own = (ids < 0) | (sources[np.maximum(ids, 0)] == sources[:, None])
    order = np.argsort(own, axis=1, kind="stable")
    ids = np.take_along_axis(np.where(own, -1, ids), order, axis=1)[:, :pool]
    scores = np.take_along_axis(np.where(own, -np.inf, scores), order, axis=1)[:, :pool]
    return ids, scores.astype(np.float32)


def weakest_positive(ctx, anchors: np.ndarray) -> np.ndarray:
    """(n,) min similarity of each anchor to the other views of its source."""
    views = source_views(ctx)[ctx.sources[anchors]]
    views = np.where(views == anchors[:, None], -1, views)
    sim = np.einsum("nd,nmd->nm", ctx.vectors[anchors], ctx.vectors[np.maximum(views, 0)])
    sim = np.where(views >= 0, sim, np.inf).min(axis=1)
    return np.where(np.isfinite(sim), sim, -np.inf).astype(np.float32)


def take_unflagged(ids: np.ndarray, scores: np.ndarray, flags: np.ndarray, k: int):
    """First k unflagged valid candidates per row -> (ids (N, k) -1 padded, scores)."""
    keep = (ids >= 0) & ~flags
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    out_ids = np.take_along_axis(ids, order, axis=1)
    ok = np.take_along_axis(keep, order, axis=1)
    out_scores = np.take_along_axis(scores, order, axis=1)
    return np.where(ok, out_ids, -1), np.where(ok, out_scores, np.nan)


def mine(data: dict, config: FalseNegativeConfig | None, pool: int, seed: int,
         labels_visible: bool = False):
    """Mine NEGATIVES per anchor; returns (neg_ids, neg_scores, seconds)."""
    vectors, sources = data["vectors"], data["sources"]
    views = int(np.bincount(sources).max())
    t0 = time.perf_counter()
    n = len(vectors)
    anchors = np.arange(n, dtype=np.int64)
    if config is None:
        ids, scores = candidates(vectors, sources, NEGATIVES, views)
        flags = np.zeros(ids.shape, dtype=bool)
    else:
        labels = data.get("labels") if labels_visible else None
        ids, scores = candidates(vectors, sources, pool, views)
        # every item is an anchor, so the candidate lists are the kNN graph the
        # community rule needs: reuse them (as `mine` can) instead of searching again
        ctx = build_context(vectors, labels, sources, config, seed=seed, neighbours=(ids, scores))
        pos = weakest_positive(ctx, anchors)
        flags, _ = flag_false_negatives(ctx, anchors, ids, scores, pos, config)
    neg_ids, neg_scores = take_unflagged(ids, scores, flags, NEGATIVES)
    return neg_ids, neg_scores, time.perf_counter() - t0


def quality(data: dict, neg_ids: np.ndarray, neg_scores: np.ndarray) -> dict:
    valid = neg_ids >= 0
    n_anchor = len(neg_ids)
    a_cls = np.repeat(data["classes"][:, None], neg_ids.shape[1], axis=1)[valid]
    a_sup = np.repeat(data["supers"][:, None], neg_ids.shape[1], axis=1)[valid]
    n_cls = data["classes"][neg_ids[valid]]
    n_sup = data["supers"][neg_ids[valid]]
    total = max(int(valid.sum()), 1)
    return {
        "fn_rate": float((a_cls == n_cls).sum() / total),
        "true_hard": float(((a_sup == n_sup) & (a_cls != n_cls)).sum() / total),
        "neg_score": float(np.nanmean(neg_scores[valid])) if valid.any() else float("nan"),
        "per_anchor": float(valid.sum() / max(n_anchor, 1)),
    }


# -- methods --------------------------------------------------------------------------
def methods(grid: bool) -> list[tuple[str, FalseNegativeConfig | None, bool, bool]]:
    """(name, config or None for naive, labels visible, part of the parameter grid)."""
    base = FalseNegativeConfig()
    out: list[tuple[str, FalseNegativeConfig | None, bool]] = [
        ("naive top-k", None, False),
        ("margin 0.95 (percent-of-positive)", replace(base, rules=("margin",)), False),
        ("near-duplicate", replace(base, rules=("near-duplicate",)), False),
        ("cluster", replace(base, rules=("cluster",)), False),
        ("community", replace(base, rules=("community",)), False),
        (f"default ({','.join(DEFAULT_RULES)})", base, False),
        ("label-free default (near-duplicate,cluster)",
         replace(base, rules=("near-duplicate", "cluster")), False),
        ("label (labels visible)", replace(base, rules=("label",)), True),
        ("default + labels visible", base, True),
        ("default, labels visible, trust_labels off", replace(base, trust_labels=False), True),
    ]
    main = len(out)
    if grid:
        for runs in (1, 4, 8):
            for votes in (1, 2):
                if votes > runs:
                    continue
                cfg = replace(base, rules=("cluster",), cluster_runs=runs, cluster_votes=votes)
                out.append((f"cluster runs={runs} votes={votes}", cfg, False))
        for m in (10, 20, 30):
            cfg = replace(base, rules=("community",), community_neighbours=m)
            out.append((f"community neighbors={m}", cfg, False))
        for extra in (("cluster",), ("community",), ("community", "cluster"),
                      ("community", "margin")):
            rules = ("label", "near-duplicate", *extra)
            out.append((f"rules {','.join(rules)}", replace(base, rules=rules), False))
        for m in (0.8, 0.9):
            out.append((f"margin {m}", replace(base, rules=("margin",), margin=m), False))
    return [(*m, i >= main) for i, m in enumerate(out)]


def run(datasets: list[tuple[str, dict, int]], pool: int, grid: bool) -> list[dict]:
    rows = []
    for name, data, seed in datasets:
        for method, cfg, visible, in_grid in methods(grid):
            if visible and "labels" not in data:
                data = {**data, "labels": data["classes"].astype(str).astype(object)}
            neg_ids, neg_scores, secs = mine(data, cfg, pool, seed, labels_visible=visible)
            row = {"data": name, "items": len(data["vectors"]), "method": method, "grid": in_grid,
                   **quality(data, neg_ids, neg_scores), "seconds": secs}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    head = ("| data | items | method | FN rate | true hard | neg score | neg/anchor | seconds |\n"
            "|---|---:|---|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        if r.get("grid"):
            continue
        lines.append(
            f"| {r['data']} | {r['items']} | {r['method']} | {r['fn_rate']:.3f} | "
            f"{r['true_hard']:.3f} | {r['neg_score']:.3f} | {r['per_anchor']:.2f} | "
            f"{r['seconds']:.2f} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """Mean over datasets of each method, plus the goal check against naive."""
    import pandas as pd

    df = pd.DataFrame(rows)
    naive = df[df.method == "naive top-k"].set_index("data")
    df["fn_vs_naive"] = df.fn_rate / df.data.map(naive.fn_rate).clip(lower=1e-9)
    df["time_vs_naive"] = df.seconds / df.data.map(naive.seconds).clip(lower=1e-9)
    g = df.groupby("method", sort=False).agg(
        fn_rate=("fn_rate", "mean"), true_hard=("true_hard", "mean"),
        fn_vs_naive=("fn_vs_naive", "mean"), worst_fn_vs_naive=("fn_vs_naive", "max"),
        worst_true_hard=("true_hard", "min"), per_anchor=("per_anchor", "mean"),
        time_vs_naive=("time_vs_naive", "mean"),
    )
    lines = ["| method | FN rate | FN / naive (mean, worst) | true hard (mean, worst) | "
             "neg/anchor | time / naive |", "|---|---:|---:|---:|---:|---:|"]
    for m, r in g.iterrows():
        lines.append(
            f"| {m} | {r.fn_rate:.3f} | {r.fn_vs_naive:.2f}, {r.worst_fn_vs_naive:.2f} | "
            f"{r.true_hard:.3f}, {r.worst_true_hard:.3f} | {r.per_anchor:.2f} | "
            f"{r.time_vs_naive:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--sizes", type=int, nargs="*", help="synthetic sources per set")
    parser.add_argument("--seeds", type=int, default=3, help="synthetic seeds per size")
    parser.add_argument("--pool", type=int, default=100, help="candidates per anchor")
    parser.add_argument("--grid", action="store_true", help="also sweep rule parameters")
    parser.add_argument("--no-digits", action="store_true")
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    parser.add_argument("--threads", type=int, default=0, help="FAISS/BLAS threads (0: all)")
    args = parser.parse_args()
    if args.threads:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    sizes = args.sizes or ([1000, 3000] if args.quick else [5000, 20000, 100000])
    datasets = []
    for n in sizes:
        for seed in range(args.seeds):
            datasets.append((f"synthetic n={n} seed={seed}", synthetic(n, seed), seed))
    if not args.no_digits:
        cache = Path(os.environ.get("PAIRKIT_BENCH_CACHE", tempfile.gettempdir())) / "pairkit-fn"
        cache.mkdir(parents=True, exist_ok=True)
        datasets.append(("digits (pixels)", digits(cache), 0))
    rows = run(datasets, args.pool, args.grid)
    print(table(rows))
    print()
    print(summary(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
