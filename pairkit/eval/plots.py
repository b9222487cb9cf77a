"""PNG figures of an evaluation: score histograms and 2-D maps by label (PCA, and UMAP when
umap-learn is installed)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

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


def parse_maps(text: str, plot_given: bool, option: str = "--map",
               plot_option: str = "--plot") -> tuple[str, ...]:
    """The maps ``text`` asks for: a comma list of :data:`MAP_METHODS`, ``all`` every one
    (``auto``: the default, pca). UsageError for an empty list, an unknown map, or maps
    other than the default without a plot folder (``plot_given``); the messages name
    ``option`` and ``plot_option`` (the command's, or the Python API's ``maps`` and
    ``plot``)."""
    from pairkit.core.options import parse_choices
    from pairkit.errors import UsageError

    maps = parse_choices(text, MAP_METHODS, option) or (
        MAP_METHODS if text.strip() == "all" else ("pca",))
    if not plot_given and text != "pca":
        raise UsageError(f"{option} needs {plot_option}")
    return maps


def check_map_methods(methods: tuple[str, ...]) -> None:
    """UsageError for an unknown map method or one listed twice, PairkitError with the
    install hint when ``umap`` is asked for and umap-learn is missing (checked without
    importing it)."""
    import importlib.util

    from pairkit.core.options import first_repeated
    from pairkit.errors import PairkitError, UsageError

    for m in methods:
        if m not in MAP_METHODS:
            raise UsageError(f"--map must be a comma list of {', '.join(MAP_METHODS)}, got {m}")
    twice = first_repeated(methods)
    if twice is not None:  # its file would be drawn twice, and moved in twice
        raise UsageError(f"--map lists {twice} twice")
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
    k = min(n_neighbors, len(x) - 1)
    x32 = np.asarray(x, dtype=np.float32)
    reducer = umap.UMAP(n_components=2, n_neighbors=k, metric="cosine", random_state=seed,
                        n_jobs=1, precomputed_knn=cosine_knn(x32, k))
    with warnings.catch_warnings():  # "transform will be unavailable": no transform is asked
        warnings.filterwarnings("ignore", message=".*knn_search_index.*", category=UserWarning)
        return np.asarray(reducer.fit_transform(x32), dtype=np.float64)


def cosine_knn(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, None]:
    """UMAP's ``precomputed_knn`` of ``x`` (n, d): each row's ``k`` nearest rows by
    cosine, itself included (ids (n, k) int64, cosine distances (n, k) float32, no search
    index). Exact, by pairkit's block search: umap-learn would otherwise compile and run
    its own (the pairwise distances below 4,096 rows, NN-descent above), most of a map's
    time (5,000 rows on a 2-core CPU: 40-46 s against 10-12 s)."""
    from pairkit.index.search import knn_search

    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    scores, ids = knn_search(unit, unit, k)
    return ids, np.clip(1.0 - scores, 0.0, 2.0).astype(np.float32), None


def map_file(method: str) -> str:
    """File name of a map: map.png (PCA, as before UMAP existed), umap.png."""
    return "map.png" if method == "pca" else f"{method}.png"


def _save(fig: object, path: Path, title: str) -> None:
    """The figure as a PNG whose Title field names what it shows (as its drawn title)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight",  # type: ignore[attr-defined]
                    metadata={"Title": title})


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(out_dir: Path, scores: dict[str, np.ndarray], vectors: np.ndarray,
                labels: np.ndarray | None, *, prefix: str = "", max_points: int = 5000,
                seed: int = 0, maps: tuple[str, ...] = ("pca",),
                head_name: str | None = None) -> list[Path]:
    """Write ``{prefix}scores.png`` (histograms) and one map per method of ``maps``:
    ``{prefix}map.png`` (PCA), ``{prefix}umap.png`` (UMAP).

    Each figure says in its title (and its PNG's Title field) which embeddings it shows:
    "PCA of the raw query embeddings (no head)" when ``head_name`` is None, else "PCA of
    the query embeddings through head NAME" (the same for "scores of the ...").
    ``labels``: object (n,) or None (one colour). At most ``max_points`` random rows are
    drawn; the 20 most frequent labels get a colour, the rest are grey (legend: see
    :func:`map_figure`).
    Returns the written paths.
    """
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if any(len(scores.get(k, ())) for k in _KIND_NAMES):
        title = "scores of the " + _subject("embeddings", head_name)
        fig = scores_figure(scores, title)
        path = out_dir / f"{prefix}scores.png"
        _save(fig, path, title)
        plt.close(fig)
        written.append(path)
    if len(vectors):
        rng = np.random.default_rng(seed)
        rows = np.arange(len(vectors))
        if len(rows) > max_points:
            rows = np.sort(rng.choice(rows, size=max_points, replace=False))
        x = np.asarray(vectors[rows], dtype=np.float32)
        lab = None if labels is None else np.asarray(labels, dtype=object)[rows]
        for method in maps:
            xy = pca_2d(x) if method == "pca" else umap_2d(x, seed)
            path = out_dir / f"{prefix}{map_file(method)}"
            title = f"{method.upper()} of the " + _subject("query embeddings", head_name)
            fig = map_figure(xy, lab, title)
            _save(fig, path, title)
            plt.close(fig)
            written.append(path)
    return written


def _subject(what: str, head_name: str | None) -> str:
    return f"raw {what} (no head)" if head_name is None else f"{what} through head {head_name}"


def scores_figure(scores: dict[str, np.ndarray], title: str) -> Any:
    """Histograms of the pair scores (positive, random and mined negatives) -> Figure."""
    fig, ax = _pyplot().subplots(figsize=(7, 4))
    for kind, name in _KIND_NAMES.items():
        if kind in scores and len(scores[kind]):
            ax.hist(scores[kind], bins=60, range=(-1, 1), alpha=0.5, density=True,
                    label=f"{name} (n={len(scores[kind])})")
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("density")
    ax.legend(fontsize=7)
    ax.set_title(title)
    return fig


def label_order(names: Any) -> list[str]:
    """Labels in natural order (numbers inside by value: 1, 2, 10; case ignored)."""
    def key(name: str) -> list[tuple[int, Any]]:
        parts = re.split(r"(\d+)", name.casefold())
        return [(0, int(p)) if p.isdigit() else (1, p) for p in parts if p]

    return sorted((str(n) for n in names), key=key)


def map_figure(xy: np.ndarray, labels: np.ndarray | None, title: str) -> Any:
    """A 2-D scatter of ``xy`` (n, 2) coloured by the 20 most frequent of ``labels``
    (object (n,) or None), the rest grey; the legend in label order, "other" last."""
    fig, ax = _pyplot().subplots(figsize=(6, 6))
    if labels is None:
        ax.scatter(xy[:, 0], xy[:, 1], s=4, alpha=0.6)
    else:
        lab = np.asarray(labels, dtype=object)
        lab = np.where(lab == None, "(none)", lab).astype(str)  # noqa: E711 - elementwise
        names, counts = np.unique(lab, return_counts=True)
        top = label_order(names[np.argsort(-counts, kind="stable")][:20])
        cmap = _pyplot().get_cmap("tab20")
        for n, name in enumerate(top):
            m = lab == name
            ax.scatter(xy[m, 0], xy[m, 1], s=4, color=cmap(n % 20), label=name)
        rest = ~np.isin(lab, top)
        if rest.any():
            ax.scatter(xy[rest, 0], xy[rest, 1], s=4, c="lightgrey", label="other", zorder=0)
        ax.legend(fontsize=6, markerscale=3, loc="best")
    ax.set_title(title)
    return fig
