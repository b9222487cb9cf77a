"""Benchmark: does a trained head beat the raw embeddings, and do mined, filtered
hard negatives beat in-batch negatives?

Data (synthetic, labelled): C classes and a continuous style (a nuisance such
as lighting or background, drawn per source whatever its class). A source is
``class_dir + 3 * style + 0.3 * identity``, so raw cosine similarity is
dominated by style; two views per source jitter the style (0.8 of its scale:
an augmentation such as colour jitter) and add noise (0.3).
Sources are split 70/30: heads train on the first part (a store of their
own) and are evaluated on the held-out sources only.

Metric: held-out kNN top-1 accuracy (view 0 of each held-out source; its
nearest other held-out item, by ``pairkit.index.search.knn_search``, must have
its class), for the raw embeddings and for heads trained with each loss:

- instance pairs, in-batch negatives only (infonce, debiased, hard);
- instance pairs + mined hard negatives (the ``--negatives`` nearest
  other-source items in the raw space, mined here with ``knn_search``),
  unfiltered / false negatives (same label: an oracle flag) eliminated /
  attracted;
- instance pairs + hard negatives mined by ``pairkit.mine`` itself with its
  label-free false-negative rules (``near-duplicate,cluster``, eliminated);
- supcon with labels (``--relation label``).

Several seeds; mean and std over seeds.

    .venv/bin/python tests/benchmarks/train_quality.py [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pairkit.core.store import Store  # noqa: E402
from pairkit.core.store_writer import write_store  # noqa: E402
from pairkit.index.search import knn_search  # noqa: E402
from pairkit.train.config import TrainConfig  # noqa: E402
from pairkit.train.head import load_head  # noqa: E402
from pairkit.train.loop import train_head  # noqa: E402
from pairkit.train.losses import LossConfig  # noqa: E402


def make_data(n_sources: int, classes: int, dim: int, seed: int, style: float = 3.0,
              views: int = 2, style_jitter: float = 0.8, view_noise: float = 0.3,
              identity: float = 0.3) -> tuple[np.ndarray, pd.DataFrame]:
    """Vectors (n_sources * views, dim) and items (path, source, view, label).

    Class directions live in one half of the space, the style (a continuous
    nuisance: every source draws its own, whatever its class) in a quarter,
    an identity component everywhere. Views jitter the style a little (an
    augmentation such as colour jitter) and add small noise.
    """
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    half, quarter = dim // 2, dim // 4
    class_dirs = rng.normal(size=(classes, half)) @ basis[:half]
    class_dirs /= np.linalg.norm(class_dirs, axis=1, keepdims=True)
    style_basis = basis[half : half + quarter]
    cls = rng.integers(0, classes, n_sources)
    sty = rng.normal(size=(n_sources, quarter)) / np.sqrt(quarter)
    ident = rng.normal(size=(n_sources, dim)) / np.sqrt(dim)
    rows, items = [], []
    for s in range(n_sources):
        for v in range(views):
            jitter = style_jitter * rng.normal(size=quarter) / np.sqrt(quarter)
            x = (class_dirs[cls[s]] + style * (sty[s] + jitter) @ style_basis + identity * ident[s]
                 + view_noise * rng.normal(size=dim) / np.sqrt(dim))
            rows.append(x)
            items.append({"path": f"s{s}_v{v}.jpg", "source": f"s{s}", "view": v,
                          "label": f"c{cls[s]}"})
    return np.asarray(rows, np.float32), pd.DataFrame(items)


def knn_top1(vectors: np.ndarray, labels: np.ndarray) -> float:
    """Leave-one-out top-1 accuracy: the nearest other row must share the label."""
    _, ids = knn_search(vectors, vectors, 2)
    self_first = ids[:, 0] == np.arange(len(vectors))
    nearest = np.where(self_first, ids[:, 1], ids[:, 0])
    return float(np.mean(labels[nearest] == labels))


def mined_table(store: Store, k: int, flag: bool) -> pd.DataFrame:
    """Triplet table: each item, another view of its source, its k nearest other-source
    items in the raw space; with ``flag``, same-label negatives get false_negative=True."""
    vectors = store.vectors()
    sources = store.source_codes()
    labels = store.labels()
    views = store.items["view"].to_numpy()
    scores, ids = knn_search(vectors, vectors, k + 8)
    other = (ids >= 0) & (sources[np.maximum(ids, 0)] != sources[:, None])
    rank = np.cumsum(other, axis=1) - 1
    keep = other & (rank < k)
    anchor = np.repeat(np.arange(store.count), keep.sum(axis=1))
    order = np.lexsort((views, sources))
    mate = np.empty(store.count, np.int64)
    # two views per source: the positive is the other view
    pairs_sorted = order.reshape(-1, 2)
    mate[pairs_sorted[:, 0]] = pairs_sorted[:, 1]
    mate[pairs_sorted[:, 1]] = pairs_sorted[:, 0]
    neg = ids[keep]
    df = pd.DataFrame({"store_id": store.content_id, "anchor_id": anchor,
                       "positive_id": mate[anchor], "negative_id": neg,
                       "neg_score": scores[keep], "neg_rank": rank[keep]})
    if flag:
        df["false_negative"] = labels[anchor] == labels[neg]
    return df


def mine_with_rules(store: Store, k: int, rules: tuple[str, ...]) -> pd.DataFrame:
    """Triplet table from ``pairkit mine``'s own code (instance relation, k hardest
    negatives) with the label-free false-negative ``rules`` eliminating candidates."""
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig
    from pairkit.mine.false_negatives import FalseNegativeConfig

    table, _ = mine_store(store, "instance", MineConfig(num_negatives=k),
                          fn_config=FalseNegativeConfig(rules=rules), fmt="triplet")
    return table


RUNS = [
    # name, loss, relation, table ("none", "raw" unfiltered, "flagged"), fn_mode
    ("infonce, in-batch", "infonce", "instance", "none", "keep"),
    ("infonce + mined", "infonce", None, "raw", "keep"),
    ("infonce + mined, FN eliminated", "infonce", None, "flagged", "eliminate"),
    ("infonce + mined, FN attracted", "infonce", None, "flagged", "attract"),
    ("triplet + mined", "triplet", None, "raw", "keep"),
    ("triplet + mined, FN eliminated", "triplet", None, "flagged", "eliminate"),
    ("debiased, in-batch", "debiased", "instance", "none", "keep"),
    ("hard (beta=1), in-batch", "hard", "instance", "none", "keep"),
    ("hard + mined, FN eliminated", "hard", None, "flagged", "eliminate"),
    ("infonce + pairkit mine, label-free FN rules (near-duplicate,cluster)", "infonce", None,
     "mine_label_free", "eliminate"),
    ("supcon, labels", "supcon", "label", "none", "keep"),
]


def run_seed(args: argparse.Namespace, seed: int, tmp: Path) -> dict[str, float]:
    vectors, items = make_data(args.sources, args.classes, args.dim, seed, args.style,
                               style_jitter=args.style_jitter)
    n_train = int(0.7 * args.sources) * 2
    train = write_store(tmp / f"train{seed}", vectors[:n_train], items.iloc[:n_train],
                        dtype="float32", force=True)
    test = write_store(tmp / f"test{seed}", vectors[n_train:], items.iloc[n_train:],
                       dtype="float32", force=True)
    view0 = (test.items["view"] == 0).to_numpy()
    test_vecs, test_labels = test.vectors()[view0], test.labels()[view0]
    out = {"raw": knn_top1(test_vecs, test_labels)}
    tables = {"raw": mined_table(train, args.negatives, flag=False),
              "flagged": mined_table(train, args.negatives, flag=True)}
    out["_fn_rate"] = float(tables["flagged"]["false_negative"].mean())
    tables["mine_label_free"] = mine_with_rules(train, args.negatives,
                                                ("near-duplicate", "cluster"))
    labels = train.labels()
    sub = tables["mine_label_free"]
    out["_fn_rate_label_free"] = float(
        np.mean(labels[sub["anchor_id"]] == labels[sub["negative_id"]]))
    for name, loss, relation, table, fn_mode in RUNS:
        cfg = TrainConfig(head="mlp", out_dim=args.out_dim, loss=LossConfig(name=loss),
                          relation=relation, fn_mode=fn_mode, epochs=args.epochs,
                          batch_size=args.batch_size, lr=args.lr, seed=seed, device="cpu")
        head_dir = tmp / f"h{seed}_{len(out)}"
        t0 = time.perf_counter()
        train_head(train, head_dir, cfg, table=None if table == "none" else tables[table],
                   force=True)
        z = load_head(head_dir).apply(test_vecs)
        out[name] = knn_top1(z, test_labels)
        out[f"_s_{name}"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 seed (smoke run)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sources", type=int, default=3000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--style", type=float, default=3.0, help="scale of the nuisance")
    ap.add_argument("--style-jitter", type=float, default=0.8,
                    help="style change between views (relative)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--negatives", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--out-dim", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.sources, args.epochs, args.batch_size = 2, 800, 15, 64
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            results.append(run_seed(args, seed, Path(tmp)))
    names = ["raw"] + [r[0] for r in RUNS]
    print(f"held-out kNN top-1, {args.seeds} seeds, {args.sources} sources "
          f"({args.classes} classes, style scale {args.style}, style jitter {args.style_jitter}, "
          f"dim {args.dim}), batch {args.batch_size}, "
          f"{args.epochs} epochs, mined negatives per anchor {args.negatives}, "
          f"same-label share of mined negatives "
          f"{np.mean([r['_fn_rate'] for r in results]):.2f} (after pairkit mine's label-free "
          f"rules: {np.mean([r['_fn_rate_label_free'] for r in results]):.2f})\n")
    print("| embeddings | kNN top-1 (mean ± std) | train s/run |")
    print("|---|---|---|")
    summary = {}
    for name in names:
        vals = np.array([r[name] for r in results])
        secs = np.mean([r.get(f"_s_{name}", 0.0) for r in results])
        summary[name] = {"mean": float(vals.mean()), "std": float(vals.std()),
                         "per_seed": vals.tolist(), "seconds": float(secs)}
        print(f"| {name} | {vals.mean():.3f} ± {vals.std():.3f} | "
              f"{'-' if name == 'raw' else f'{secs:.1f}'} |")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                        "results": summary}, indent=2))


if __name__ == "__main__":
    main()
