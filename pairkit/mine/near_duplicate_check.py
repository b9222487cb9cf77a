"""Which pairs of sources are near-duplicates: the decision behind ``pairkit dedup`` and
the ``near-duplicate`` false-negative rule of ``mine``.

Two checks share one small contract (``edges(items)``, ``linked(items, leader, others)``,
``describe()``), so :func:`pairkit.mine.near_duplicates.find_near_duplicates` groups with
either:

- :class:`PixelCheck` (the default when the store's images can be read): candidates are
  each source's nearest sources by the store's embedding *and* by a blurred-thumbnail
  descriptor, each candidate pair is aligned on the pixels (a zoom and a sub-pixel shift,
  :mod:`pairkit.mine.near_duplicate_pixels`) and is a near-duplicate when its aligned
  correlation reaches a threshold **calibrated on the store**: copies of a sample of the
  store's own images are made in memory (:mod:`pairkit.mine.near_duplicate_copies`) and
  the threshold is the 1st percentile of their scores against their originals, raised
  when more of the store's images reach it than duplicates explain
  (:mod:`pairkit.mine.near_duplicate_threshold`). Nothing in it depends on the encoder,
  so it holds for any model.
- :class:`ThresholdCheck`: inner product of the stored vectors >= a fixed threshold (an
  imported store without images, ``--threshold``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.mine.thresholds import NEAR_DUPLICATE_THRESHOLD

CANDIDATES = 8  # nearest sources per source, by the embedding and by the descriptor
CALIBRATION_SAMPLE = 200  # images copied (once per edit) to calibrate
COPY_QUANTILE = 0.01  # the threshold: this quantile of the known copies' scores
PREFILTER_MAX = 0.95  # coarse score a pair needs before the fine alignment (at most)
FINE = 96  # thumbnail side of the fine alignment
# a calibration copy scoring below this against its original is left out (see _calibrate)
MIN_COPY_SCORE = 0.5


@dataclass
class ThresholdCheck:
    """Near-duplicates by the stored vectors: inner product >= ``threshold``."""

    vectors: np.ndarray  # (N, d) float32 rows of the store
    threshold: float
    batch_size: int = 4096
    device: str = "cpu"
    backend: str = "faiss"
    pairs: Any = None  # the pair stream (range_search_blocks' signature); None: here
    # (pairkit.index.partitioned_range.pairs_here: by k-means partitions on big stores)
    # the search's progress hook (range_search_blocks'): on_start(sources), progress(m)
    progress: Any = None
    on_start: Any = None

    def edges(self, items: np.ndarray) -> Any:
        """Stream of (a, b) index arrays into ``items``, a < b, similar enough. Rows read
        on demand (:class:`~pairkit.core.row_view.RowView`) go to the Ray search as they
        are (its workers read them), else they are read here."""
        from pairkit.core.row_view import is_view
        from pairkit.index.partitioned_range import pairs_here

        if is_view(self.vectors):
            vecs = self.vectors.subset(items)
            if self.pairs is None:
                vecs = np.asarray(vecs)
        else:
            vecs = self.vectors[items]
        for a, b, _ in (self.pairs or pairs_here)(
            vecs, vecs, self.threshold, batch_size=self.batch_size, device=self.device,
            backend=self.backend, progress=self.progress, on_start=self.on_start,
        ):
            upper = b > a
            yield a[upper], b[upper]

    def reading(self, rows: Any) -> ThresholdCheck:
        """This check deciding ``linked`` from ``rows`` (the gathered rows of the
        candidates: :meth:`pairkit.core.row_view.RowView.gather`)."""
        from dataclasses import replace

        return replace(self, vectors=rows)

    def linked(self, items: np.ndarray, leader: int, others: np.ndarray) -> np.ndarray:
        """(len(others),) bool: ``items[others]`` within the threshold of ``items[leader]``."""
        sims = self.vectors[items[others]] @ self.vectors[items[leader]]
        return sims >= np.float32(self.threshold)

    def describe(self) -> dict[str, Any]:
        return {"method": "threshold", "threshold": float(self.threshold)}


@dataclass
class PixelCheck:
    """Near-duplicates by aligned pixels, threshold calibrated on the store (module doc).

    ``vectors`` (N, d) float32 rows of the store, ``paths`` (N,) item paths under
    ``image_root`` (plain files, tar members, dataset rows: ``image_column`` is a dataset
    store's ``embed --image-column``, one or (N,) one per item). ``threshold`` None:
    calibrated; ``fallback`` decides pairs with an unreadable image by the vectors' inner
    product.
    """

    vectors: np.ndarray
    paths: np.ndarray
    image_root: str | Path | np.ndarray  # one folder, or (N,) one per item
    threshold: float | None = None
    fallback: float = NEAR_DUPLICATE_THRESHOLD
    candidates: int = CANDIDATES
    sample: int = CALIBRATION_SAMPLE
    seed: int = 0
    backend: Any = None  # pairkit.index.backend.SearchBackend for the kNN searches
    # the progress hook: on_start(sources), progress(1) per source's image read (the first
    # pass over the images; the searches, calibration and alignment follow it)
    progress: Any = None
    on_start: Any = None
    image_column: str | np.ndarray | None = None  # one, or (N,) one per item
    calibration: dict[str, Any] = field(default_factory=dict)
    _fine: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    # -- thumbnails ---------------------------------------------------------------------
    def _read(self, items: np.ndarray, size: int, progress: Any = None
              ) -> tuple[np.ndarray, np.ndarray]:
        from pairkit.mine.near_duplicate_pixels import read_thumbnails

        return read_thumbnails(self.image_root, self.paths, items, size, progress,
                               self.image_column)

    def _fine_thumbs(self, items: np.ndarray) -> np.ndarray:
        """(n, FINE, FINE) thumbnails of rows ``items``, read once each."""
        missing = np.array([i for i in np.unique(items) if int(i) not in self._fine],
                           dtype=np.int64)
        if len(missing):
            thumbs, _ = self._read(missing, FINE)
            for i, t in zip(missing, thumbs, strict=True):
                self._fine[int(i)] = t
        return np.stack([self._fine[int(i)] for i in items]) if len(items) else \
            np.zeros((0, FINE, FINE), np.float32)

    # -- scores -------------------------------------------------------------------------
    def _scores(self, coarse_a: np.ndarray, coarse_b: np.ndarray, fine_a: Any, fine_b: Any,
                prefilter: float) -> tuple[np.ndarray, np.ndarray]:
        """(coarse, fine) aligned correlations of pairs; fine is -1 below ``prefilter``.
        ``fine_a``/``fine_b``: functions from pair positions to (n, FINE, FINE) thumbs."""
        from pairkit.mine.near_duplicate_pixels import aligned_correlation, refine_correlation

        coarse, scale, shift = aligned_correlation(coarse_a, coarse_b)
        fine = np.full(len(coarse), -1.0, dtype=np.float32)
        go = np.flatnonzero(coarse >= prefilter)
        block = 512
        for lo in range(0, len(go), block):
            g = go[lo: lo + block]
            fine[g] = refine_correlation(fine_a(g), fine_b(g), scale[g],
                                         shift[g] * (FINE / coarse_a.shape[-1]))
        return coarse, fine

    def _calibrate(self, items: np.ndarray, ok: np.ndarray) -> None:
        """Score copies of a sample of ``items`` against their originals (the threshold
        is set from them once the store's own pairs are scored) and set the prefilter."""
        from pairkit.encode.images import DecodeError
        from pairkit.encode.item_images import item_image, load_item_source
        from pairkit.mine.near_duplicate_copies import EDITS, edited_copy
        from pairkit.mine.near_duplicate_pixels import THUMB, thumbnails_of

        rng = np.random.default_rng(self.seed)
        readable = np.flatnonzero(ok)
        chosen = np.sort(rng.choice(readable, size=min(self.sample, len(readable)),
                                    replace=False))
        oc, of, cc, cf, owner = [], [], [], [], []
        roots, columns = self.image_root, self.image_column
        for pos in chosen:
            i = items[pos]
            root = roots[i] if isinstance(roots, np.ndarray) else roots
            column = columns[i] if isinstance(columns, np.ndarray) else columns
            got = item_image(root, str(self.paths[i]), image_column=column)
            if got is None:
                continue
            try:
                img = load_item_source(got[0], draft_size=2 * FINE)
            except (DecodeError, OSError, ValueError, TypeError):
                continue
            small, big = thumbnails_of(img, (THUMB, FINE))
            for edit in EDITS:
                cs, cb = thumbnails_of(edited_copy(img, edit, rng), (THUMB, FINE))
                oc.append(small)
                of.append(big)
                cc.append(cs)
                cf.append(cb)
                owner.append(pos)
        left_out = 0
        if oc:
            oc_a, of_a, cc_a, cf_a = (np.stack(x) for x in (oc, of, cc, cf))
            coarse, fine = self._scores(cc_a, oc_a, lambda g: cf_a[g], lambda g: of_a[g], -2.0)
            # a copy scoring below this is one the check can't see at all (a small mark on
            # a blank page, a strip too thin to edit): kept, such copies drag the
            # threshold towards 0 and every pair of the store over it; the threshold is
            # the one for the copies the check can see
            usable = fine >= MIN_COPY_SCORE
            left_out = int((~usable).sum())
            coarse, fine = coarse[usable], fine[usable]
            owners = np.asarray(owner)[usable]
        if not oc or not len(fine):
            self.threshold = self.threshold if self.threshold is not None else 0.995
            self.calibration = {"copies": 0, "copies_left_out": left_out}
            self._copy_scores = None
            return
        self.prefilter = float(min(PREFILTER_MAX, np.quantile(coarse, 0.005) - 0.01))
        self._copy_scores = fine
        self.calibration = {
            "copies": len(fine), "images": len(np.unique(owners)),
            "copies_left_out": left_out,
            "copies_median": round(float(np.median(fine)), 5),
            "prefilter": round(self.prefilter, 4),
        }

    def _set_threshold(self, nearest: np.ndarray, pair_scores: np.ndarray) -> None:
        """The calibrated threshold from the copies, ``nearest`` (each readable image's
        best score against another image) and the pairs' scores
        (:mod:`near_duplicate_threshold`)."""
        from pairkit.mine.near_duplicate_threshold import choose_threshold

        copies = getattr(self, "_copy_scores", None)
        if copies is None or not len(copies):
            return
        choice = choose_threshold(copies, nearest, COPY_QUANTILE, pair_scores=pair_scores)
        if self.threshold is None:
            self.threshold = choice.threshold
            self.calibration.update(choice.record())
        else:  # the user's threshold decides; what the calibration would have set, beside
            self.calibration["calibrated_threshold"] = choice.threshold

    # -- the contract -------------------------------------------------------------------
    def edges(self, items: np.ndarray) -> Any:
        """(a, b) index arrays into ``items`` (one per source): the near-duplicate pairs."""
        from pairkit.mine.clusters import knn_graph
        from pairkit.mine.near_duplicate_pixels import descriptors

        items = np.asarray(items, dtype=np.int64)
        n = len(items)
        if n < 2:
            return
        if self.on_start is not None:
            self.on_start(n)
        self._coarse, ok = self._read(items, 32, self.progress)
        self._ok = ok
        k = min(self.candidates, n - 1)
        own = np.arange(n, dtype=np.int64)
        vecs = np.ascontiguousarray(self.vectors[items], dtype=np.float32)
        ids_e, _ = knn_graph(vecs, own, k, backend=self.backend)
        desc = descriptors(self._coarse)
        ids_d, _ = knn_graph(desc, own, k, backend=self.backend)
        cand = np.concatenate([ids_e, ids_d], axis=1)
        self.prefilter = PREFILTER_MAX
        self._calibrate(items, ok)
        a, b = candidate_pairs(cand)
        both = ok[a] & ok[b]
        found = np.zeros(len(a), dtype=bool)
        if (~both).any():  # an unreadable image: the vectors decide
            sims = np.einsum("ij,ij->i", vecs[a[~both]], vecs[b[~both]])
            found[~both] = sims >= np.float32(self.fallback)
        pa, pb = a[both], b[both]
        _, fine = self._scores(self._coarse[pa], self._coarse[pb],
                               lambda g: self._fine_thumbs(items[pa[g]]),
                               lambda g: self._fine_thumbs(items[pb[g]]), self.prefilter)
        best = np.full(n, -1.0, dtype=np.float32)
        np.maximum.at(best, pa, fine)
        np.maximum.at(best, pb, fine)
        self._set_threshold(best[ok], fine)
        found[both] = fine >= np.float32(self.threshold)
        self.calibration["pairs_checked"] = int(both.sum())
        self.calibration["pairs_aligned"] = int((fine > -1).sum())
        yield a[found], b[found]

    def linked(self, items: np.ndarray, leader: int, others: np.ndarray) -> np.ndarray:
        """(len(others),) bool: ``items[others]`` near-duplicates of ``items[leader]``."""
        others = np.asarray(others, dtype=np.int64)
        out = np.zeros(len(others), dtype=bool)
        ok = getattr(self, "_ok", None)
        if ok is None:  # no edges were asked for (exact duplicates only)
            return others == leader
        both = ok[others] & ok[leader]
        if (~both).any():
            v = self.vectors[items[others[~both]]] @ self.vectors[items[leader]]
            out[~both] = v >= np.float32(self.fallback)
        if both.any():
            o = others[both]
            lead = np.full(len(o), leader)
            _, fine = self._scores(self._coarse[lead], self._coarse[o],
                                   lambda g: self._fine_thumbs(items[lead[g]]),
                                   lambda g: self._fine_thumbs(items[o[g]]), -2.0)
            out[both] = fine >= np.float32(self.threshold)
        out[others == leader] = True
        return out

    def reading(self, rows: Any) -> PixelCheck:
        """This check (its vectors are an array in memory: see :func:`choose_check`)."""
        return self

    def describe(self) -> dict[str, Any]:
        return {"method": "pixels", **self.calibration,
                "threshold": float(self.threshold or 0.0), "fallback_threshold": self.fallback}


def candidate_pairs(cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs ``(a, b)``, ``a < b``, of each row ``a`` of ``cand`` (n, m) with
    its entries ``b`` (-1: none; ``b == a`` left out), as two int64 arrays ascending by
    ``a`` then ``b``: ``np.unique(pairs, axis=0)``'s rows, from
    :func:`pairkit.core.unique.unique_rows` (one int64 key a pair)."""
    from pairkit.core.unique import unique_rows

    cand = np.asarray(cand, dtype=np.int64)
    a = np.repeat(np.arange(len(cand), dtype=np.int64), cand.shape[1])
    b = cand.ravel()
    keep = b >= 0
    a, b = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    pairs = unique_rows(np.stack([a, b], axis=1))[0]
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs[:, 0], pairs[:, 1]


def images_readable(image_root: str | None, paths: np.ndarray, probe: int = 16,
                    image_column: str | None = None) -> bool:
    """True when the store has an image root and the first ``probe`` paths are mostly
    images there: files, or tar members and dataset rows that read
    (:func:`pairkit.encode.item_images.item_image`; ``image_column``: a dataset store's).
    The pixel check then runs; else the vectors decide."""
    from pairkit.core.paths import image_root_problem
    from pairkit.encode.item_images import item_image

    if image_root_problem(image_root) is not None or len(paths) == 0:
        return False

    probe_paths = paths[: min(probe, len(paths))]
    found = 0
    for p in probe_paths:
        got = item_image(str(image_root), str(p), image_column=image_column)
        found += got is not None
    return found * 2 >= len(probe_paths)


METHODS = ("auto", "pixels", "threshold")


def refuse_pixel_threshold(method: str, threshold: float | None) -> None:
    """UsageError: ``--pixel-threshold`` given to a run that compares embeddings."""
    from pairkit.errors import UsageError

    why = ("--method threshold" if method == "threshold" else "--threshold is given"
           if threshold is not None else "the store's images can't be read")
    raise UsageError(f"--pixel-threshold applies to the pixel check, and this run compares "
                     f"embeddings ({why})")


def check_pixel_threshold(value: float | None) -> None:
    """UsageError for a ``--pixel-threshold`` outside (-1, 1] (None: the default)."""
    from pairkit.errors import UsageError

    if value is not None and not -1.0 < value <= 1.0:
        raise UsageError(f"--pixel-threshold must be in (-1, 1], got {value:g}")


def choose_check(vectors: np.ndarray, paths: np.ndarray | None, image_root: str | None,
                 method: str = "auto", threshold: float | None = None,
                 pixel_threshold: float | None = None, image_column: str | None = None,
                 **threshold_options: Any) -> Any:
    """The near-duplicate check of a store: ``auto`` = :class:`PixelCheck` when its images
    can be read (and no embedding ``threshold`` was asked for), else
    :class:`ThresholdCheck` at ``threshold`` (None: ``pairkit dedup``'s default).
    ``threshold_options`` go to :class:`ThresholdCheck` (batch_size, device, backend,
    pairs, and the progress hook: progress, on_start, also :class:`PixelCheck`'s);
    ``backend`` objects for
    the kNN searches of the pixel check go in ``knn_backend``; ``image_column``: a dataset
    store's (:func:`pairkit.encode.item_images.image_column_of`). The one decision
    ``dedup`` and the ``near-duplicate`` rule share."""
    from pairkit.errors import UsageError
    from pairkit.mine.near_duplicates import DEFAULT_THRESHOLD, check_threshold

    if method not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, got {method}")
    knn_backend = threshold_options.pop("knn_backend", None)
    hooks = {k: threshold_options.get(k) for k in ("progress", "on_start")}
    seed = int(threshold_options.pop("seed", 0))
    t = check_threshold(DEFAULT_THRESHOLD if threshold is None else threshold)
    check_pixel_threshold(pixel_threshold)
    readable = paths is not None and images_readable(image_root, paths,
                                                     image_column=image_column)
    if method == "pixels" and not readable:
        from pairkit.core.paths import image_root_problem

        problem = image_root_problem(image_root)
        why = f"is unreadable: {image_root}" if problem is None else problem
        if "://" in str(image_root):  # on object storage: the vectors can decide
            why += " (--method threshold compares the vectors)"
        raise UsageError(f"--method pixels needs the store's images: its image_root {why}")
    use_pixels = method == "pixels" or (method == "auto" and readable and threshold is None)
    if pixel_threshold is not None and not use_pixels:
        refuse_pixel_threshold(method, threshold)
    if use_pixels:  # it reads every image here: and the vectors (a view read now)
        return PixelCheck(np.asarray(vectors, dtype=np.float32), np.asarray(paths),
                          str(image_root), threshold=pixel_threshold, fallback=t, seed=seed,
                          backend=knn_backend, image_column=image_column, **hooks)
    from pairkit.core.row_view import is_view

    rows = vectors if is_view(vectors) else np.asarray(vectors, dtype=np.float32)
    return ThresholdCheck(rows, t, **threshold_options)
