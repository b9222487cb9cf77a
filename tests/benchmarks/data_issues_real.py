"""Label-error and outlier flags of ``pairkit issues`` against planted truth in real stores.

Label errors: a share of a labelled real store's sources (Fashion-MNIST or MNIST embedded
with ImageNet EfficientNet-Lite0) get a random *other* label; precision and recall of the
``label-error`` flags against those, beside a random baseline that flags as many sources
at random (its expected precision is the corrupted share). Outliers: sources of another
set embedded with the same encoder (MNIST digits in a Fashion-MNIST store) are added;
precision and recall of the ``outlier`` flags, and the random baseline.

Run:  .venv/bin/python tests/benchmarks/data_issues_real.py --store A [--foreign B]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def one_per_source(path: str) -> tuple[np.ndarray, np.ndarray]:
    from pairkit.core.store import Store
    from pairkit.mine.near_duplicates import source_nodes

    st = Store.open(path)
    items = st.items
    _, rows = source_nodes(len(items), items["source"].to_numpy(dtype=object),
                           items["view"].to_numpy())
    labels = st.labels()
    return st.vectors(np.float32)[rows], np.asarray(labels, dtype=object)[rows]


def pr(flag: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    tp = int((flag & truth).sum())
    return {"flagged": int(flag.sum()), "precision": tp / max(int(flag.sum()), 1),
            "recall": tp / max(int(truth.sum()), 1)}


def label_errors(vectors: np.ndarray, labels: np.ndarray, share: float, seed: int,
                 k: int) -> dict:
    from pairkit.eval.data_issues import find_issues

    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    noisy = labels.copy()
    chosen = rng.choice(len(labels), size=round(share * len(labels)), replace=False)
    for i in chosen:
        noisy[i] = rng.choice(classes[classes != labels[i]])
    truth = np.zeros(len(labels), dtype=bool)
    truth[chosen] = True
    t0 = time.perf_counter()
    found, _, _ = find_issues(vectors, noisy, checks=("label-error",), k=k)
    secs = time.perf_counter() - t0
    flag = found["label-error"].flag
    rand = np.zeros(len(labels), dtype=bool)
    rand[rng.choice(len(labels), size=int(flag.sum()), replace=False)] = True
    # also the top-m by score, m = the number corrupted (a ranking measure)
    top = np.zeros(len(labels), dtype=bool)
    top[np.argsort(-found["label-error"].score)[: len(chosen)]] = True
    return {"check": "label-error", "share": share, "seed": seed, "k": k,
            "sources": len(labels), "seconds": round(secs, 2), **pr(flag, truth),
            "random_precision": pr(rand, truth)["precision"],
            "top_m_precision": pr(top, truth)["precision"]}


def outliers(vectors: np.ndarray, foreign: np.ndarray, n_foreign: int, seed: int,
             k: int) -> dict:
    from pairkit.eval.data_issues import find_issues

    rng = np.random.default_rng(seed)
    extra = foreign[rng.choice(len(foreign), size=n_foreign, replace=False)]
    allv = np.concatenate([vectors, extra])
    truth = np.zeros(len(allv), dtype=bool)
    truth[len(vectors):] = True
    found, _, _ = find_issues(allv, None, checks=("outlier",), k=k)
    flag = found["outlier"].flag
    rand = np.zeros(len(allv), dtype=bool)
    rand[rng.choice(len(allv), size=max(int(flag.sum()), 1), replace=False)] = True
    return {"check": "outlier", "share": n_foreign / len(allv), "seed": seed, "k": k,
            "sources": len(allv), **pr(flag, truth),
            "random_precision": pr(rand, truth)["precision"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="a labelled store")
    ap.add_argument("--foreign", default=None, help="a store of another set, same encoder")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    vectors, labels = one_per_source(args.store)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for share in (0.05, 0.10, 0.20):
            rows.append(label_errors(vectors, labels, share, seed, args.k))
            print(json.dumps(rows[-1]), flush=True)
        if args.foreign:
            foreign, _ = one_per_source(args.foreign)
            for n in (10, 40):
                rows.append(outliers(vectors, foreign, n, seed, args.k))
                print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
