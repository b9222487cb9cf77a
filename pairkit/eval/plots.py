"""PNG figures of an evaluation: score histograms and a 2-D PCA map by label."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pairkit.core.atomic import atomic_path

_KIND_NAMES = {
    "positive": "positive pairs (views of one source)",
    "random_negative": "random pairs (other sources)",
    "mined_negative": "mined negatives (nearest other-class / other-source reference)",
}


def pca_2d(x: np.ndarray) -> np.ndarray:
    """First two principal components of ``x`` (n, d) -> float64 (n, 2) (n >= 1)."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0, keepdims=True)
    if len(x) < 2:
        return np.zeros((len(x), 2))
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    comps = vt[:2]
    out = centred @ comps.T
    if out.shape[1] < 2:
        out = np.pad(out, ((0, 0), (0, 2 - out.shape[1])))
    return out


def _save(fig: object, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]


def write_plots(out_dir: Path, scores: dict[str, np.ndarray], vectors: np.ndarray,
                labels: np.ndarray | None, *, prefix: str = "", max_points: int = 5000,
                seed: int = 0) -> list[Path]:
    """Write ``{prefix}scores.png`` (histograms) and ``{prefix}map.png`` (PCA map).

    ``labels``: object (n,) or None (one colour). At most ``max_points`` random rows
    are drawn; the 20 most frequent labels get a colour, the rest are grey.
    Returns the written paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    kinds = [k for k in ("positive", "random_negative", "mined_negative")
             if k in scores and len(scores[k])]
    if kinds:
        fig, ax = plt.subplots(figsize=(7, 4))
        for kind in kinds:
            ax.hist(scores[kind], bins=60, range=(-1, 1), alpha=0.5, density=True,
                    label=f"{_KIND_NAMES[kind]} (n={len(scores[kind])})")
        ax.set_xlabel("cosine similarity")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
        path = out_dir / f"{prefix}scores.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    if len(vectors):
        rng = np.random.default_rng(seed)
        rows = np.arange(len(vectors))
        if len(rows) > max_points:
            rows = np.sort(rng.choice(rows, size=max_points, replace=False))
        xy = pca_2d(np.asarray(vectors[rows], dtype=np.float32))
        fig, ax = plt.subplots(figsize=(6, 6))
        if labels is None:
            ax.scatter(xy[:, 0], xy[:, 1], s=4, alpha=0.6)
        else:
            lab = np.asarray(labels, dtype=object)[rows]
            lab = np.where(lab == None, "(none)", lab)  # noqa: E711 - elementwise
            names, counts = np.unique(lab.astype(str), return_counts=True)
            top = names[np.argsort(-counts, kind="stable")][:20]
            rest = ~np.isin(lab.astype(str), top)
            if rest.any():
                ax.scatter(xy[rest, 0], xy[rest, 1], s=4, c="lightgrey", label="other")
            cmap = plt.get_cmap("tab20")
            for n, name in enumerate(top):
                m = lab.astype(str) == name
                ax.scatter(xy[m, 0], xy[m, 1], s=4, color=cmap(n % 20), label=str(name))
            ax.legend(fontsize=6, markerscale=3, loc="best")
        ax.set_title("PCA of the query embeddings")
        path = out_dir / f"{prefix}map.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written
