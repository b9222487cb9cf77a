"""PNG figures of an evaluation: score histograms and 2-D maps by label (PCA, and UMAP when
umap-learn is installed)."""

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


MAP_METHODS = ("pca", "umap")
UMAP_HINT = "--map umap needs umap-learn: pip install umap-learn (or pip install 'pairkit[umap]')"


def check_map_methods(methods: tuple[str, ...]) -> None:
    """UsageError for an unknown map method, PairkitError with the install hint when
    ``umap`` is asked for and umap-learn is missing (checked without importing it)."""
    import importlib.util

    from pairkit.errors import PairkitError, UsageError

    for m in methods:
        if m not in MAP_METHODS:
            raise UsageError(f"--map must be a comma list of {', '.join(MAP_METHODS)}, got {m}")
    if "umap" in methods and importlib.util.find_spec("umap") is None:
        raise PairkitError(UMAP_HINT)


def umap_2d(x: np.ndarray, seed: int = 0, n_neighbors: int = 15) -> np.ndarray:
    """UMAP (McInnes et al. 2018, umap-learn) of ``x`` (n, d) with cosine distances ->
    float64 (n, 2); ``seed`` makes it reproducible. Needs n >= 4."""
    from pairkit.errors import PairkitError

    try:
        import umap
    except ImportError:
        raise PairkitError(UMAP_HINT) from None
    if len(x) < 4:
        raise PairkitError(f"--map umap needs at least 4 query rows, got {len(x)}")
    reducer = umap.UMAP(n_components=2, n_neighbors=min(n_neighbors, len(x) - 1),
                        metric="cosine", random_state=seed, n_jobs=1)
    return np.asarray(reducer.fit_transform(np.asarray(x, dtype=np.float32)), dtype=np.float64)


def map_file(method: str) -> str:
    """File name of a map: map.png (PCA, as before UMAP existed), umap.png."""
    return "map.png" if method == "pca" else f"{method}.png"


def _save(fig: object, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]


def write_plots(out_dir: Path, scores: dict[str, np.ndarray], vectors: np.ndarray,
                labels: np.ndarray | None, *, prefix: str = "", max_points: int = 5000,
                seed: int = 0, maps: tuple[str, ...] = ("pca",)) -> list[Path]:
    """Write ``{prefix}scores.png`` (histograms) and one map per method of ``maps``:
    ``{prefix}map.png`` (PCA), ``{prefix}umap.png`` (UMAP).

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
        x = np.asarray(vectors[rows], dtype=np.float32)
        for method in maps:
            xy = pca_2d(x) if method == "pca" else umap_2d(x, seed)
            path = out_dir / f"{prefix}{map_file(method)}"
            _draw_map(plt, xy, labels, rows, f"{method.upper()} of the query embeddings", path)
            written.append(path)
    return written


def _draw_map(plt: object, xy: np.ndarray, labels: np.ndarray | None, rows: np.ndarray,
              title: str, path: Path) -> None:
    """One 2-D scatter coloured by the 20 most frequent labels (the rest grey)."""
    fig, ax = plt.subplots(figsize=(6, 6))  # type: ignore[attr-defined]
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
        cmap = plt.get_cmap("tab20")  # type: ignore[attr-defined]
        for n, name in enumerate(top):
            m = lab.astype(str) == name
            ax.scatter(xy[m, 0], xy[m, 1], s=4, color=cmap(n % 20), label=str(name))
        ax.legend(fontsize=6, markerscale=3, loc="best")
    ax.set_title(title)
    _save(fig, path)
    plt.close(fig)  # type: ignore[attr-defined]
