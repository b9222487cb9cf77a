"""Building, placing and saving FAISS indices over a store's vectors.

Kinds (all inner product; on L2-normalised rows that is cosine similarity):

- ``flat``: exact (``IndexFlatIP``).
- ``ivf``: inverted lists over k-means cells (``IndexIVFFlat``); ``nprobe`` cells
  are scanned per query. Stored vectors are exact, only the candidate set is
  approximate.
- ``ivfpq``: IVF with product-quantised codes (``IndexIVFPQ``): smallest memory,
  approximate scores (callers re-score the candidates exactly).
- ``hnsw``: graph search (``IndexHNSWFlat``), ``ef_search`` sets the beam.

``auto`` is exact up to ``exact_max_rows`` rows and ``ivf`` above.

GPU (``device``, the ``--device`` of mine, dedup and eval, with ``backend``): ``auto``
clones a CPU-built index onto all GPUs FAISS sees (none with faiss-cpu), ``cuda`` onto
all of them, ``cuda:N`` onto GPU N, ``cpu`` keeps it on the CPU. Several GPUs hold shards
(each 1/n of the rows), optionally with float16 storage. FAISS GPU search handles
k <= 2048 only; :func:`knn_search` falls back to a CPU copy above that. When FAISS sees
no GPU but torch does, or on request, the exact search runs in torch instead
(``backend``, see :mod:`pairkit.index.backend` and :mod:`pairkit.index.torch_search`).

A saved index lives in ``STORE/index/<kind>.faiss`` beside ``<kind>.json``,
which records the store ``content_id`` it was built for and the sha256 and size of
the ``.faiss`` file (the JSON is sealed with its own checksum). :func:`load_index`
ignores (returns None for) an index built for other rows or by an older pairkit
(no checksum), and refuses one whose bytes don't match: nothing unverified reaches
``faiss.read_index``. Saving holds the store's writer lock.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pairkit.core.atomic import atomic_open, atomic_path, remove_stale_temps
from pairkit.core.integrity import (
    dump_sealed,
    read_json_file,
    seal_ok,
    sha256_fd,
)
from pairkit.core.lock import writer_lock
from pairkit.core.threads import import_faiss
from pairkit.errors import PairkitError, UsageError
from pairkit.index.backend import (
    CPU,
    SearchBackend,
    faiss_gpus,
    for_index_kind,
    resolve_backend,
)

KINDS = ("flat", "ivf", "ivfpq", "hnsw")
INDEX_CHOICES = ("auto", *KINDS)
EXACT_MAX_ROWS_CPU = 50_000
EXACT_MAX_ROWS_GPU = 1_000_000
INDEX_DIR = "index"
MAX_META_BYTES = 1 << 20


@dataclass(frozen=True)
class IndexSpec:
    """What index to build and how to search it. ``None`` fields get size-based defaults."""

    kind: str = "flat"
    nlist: int | None = None
    nprobe: int | None = None
    pq_m: int | None = None
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int | None = None
    float16: bool = False
    seed: int = 0

    def resolved(self, n: int, dim: int) -> IndexSpec:
        """This spec with every size-dependent default filled in for ``n`` rows of ``dim``."""
        if self.kind not in KINDS:
            raise PairkitError(f"--index must be one of {', '.join(KINDS)}, got {self.kind}")
        spec = self
        if self.kind in ("ivf", "ivfpq"):
            nlist = self.nlist or default_nlist(n)
            nlist = max(1, min(nlist, n))
            nprobe = self.nprobe or default_nprobe(nlist)
            spec = replace(spec, nlist=nlist, nprobe=max(1, min(nprobe, nlist)))
        if self.kind == "ivfpq":
            spec = replace(spec, pq_m=self.pq_m or default_pq_m(dim))
            if dim % spec.pq_m:  # type: ignore[operator]
                raise PairkitError(f"--pq-m must divide the store dim {dim}, got {spec.pq_m}")
        if self.kind == "hnsw":
            spec = replace(spec, ef_search=self.ef_search or 128)
        return spec

    def describe(self) -> str:
        """Short human description, e.g. ``ivf(nlist=447, nprobe=28)``."""
        parts = []
        if self.kind in ("ivf", "ivfpq"):
            parts += [f"nlist={self.nlist}", f"nprobe={self.nprobe}"]
        if self.kind == "ivfpq":
            parts.append(f"m={self.pq_m}")
        if self.kind == "hnsw":
            parts += [f"M={self.hnsw_m}", f"ef_search={self.ef_search}"]
        if self.float16:
            parts.append("float16")
        return f"{self.kind}({', '.join(parts)})" if parts else self.kind


def default_nlist(n: int) -> int:
    """IVF cells for ``n`` rows: about sqrt(n) (FAISS guide: 1..16 x sqrt(n)), but at most
    n / 39 so that k-means has the 39 training points per cell FAISS asks for."""
    return max(1, min(int(round(math.sqrt(max(n, 1)))), n // 39))


def default_nprobe(nlist: int) -> int:
    """Cells scanned per query: 1/32 of the cells, at least 8. At N = 200,000
    (nlist 447, nprobe 13) the mined negatives' recall@5 against exact search was
    0.999, at 4.8x the speed of exact (tests/benchmarks/mine_speed.py)."""
    return max(8, nlist // 32)


def default_pq_m(dim: int) -> int:
    """PQ sub-quantisers: the largest divisor of ``dim`` giving >= 4 dims per code, <= 64."""
    for m in range(min(64, max(1, dim // 4)), 0, -1):
        if dim % m == 0:
            return m
    return 1


def choose_kind(n: int, exact_max_rows: int) -> tuple[str, str]:
    """Resolve ``--index auto``: ``(kind, reason)``; exact up to ``exact_max_rows`` rows."""
    if n <= exact_max_rows:
        return "flat", f"auto: {n:,} rows <= {exact_max_rows:,}, exact search"
    return "ivf", f"auto: {n:,} rows > {exact_max_rows:,}, approximate search (ivf)"


def is_lossy(spec: IndexSpec) -> bool:
    """True when the index returns approximate scores (callers should re-score)."""
    return spec.kind == "ivfpq" or spec.float16


def build_index(vectors: np.ndarray, spec: IndexSpec) -> Any:
    """Build a CPU FAISS index of ``spec.kind`` over ``vectors`` (N, d) (rows in id order).

    ``spec`` must be :meth:`IndexSpec.resolved`. IVF training uses a seeded sample of
    at most 64 x nlist rows. Returns the FAISS index (ids = row numbers).
    """
    faiss = import_faiss()
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, d = x.shape
    metric = faiss.METRIC_INNER_PRODUCT
    sq16 = faiss.ScalarQuantizer.QT_fp16
    if spec.kind == "flat":
        index = (
            faiss.IndexScalarQuantizer(d, sq16, metric) if spec.float16 else faiss.IndexFlatIP(d)
        )
    elif spec.kind in ("ivf", "ivfpq"):
        quantizer = faiss.IndexFlatIP(d)
        if spec.kind == "ivfpq":
            if n < 1000:
                raise PairkitError(f"an ivfpq index needs at least 1000 rows, the store has {n}")
            # 8-bit codebooks want 39 x 256 training rows; smaller stores get fewer bits
            nbits = max(4, min(8, int(math.log2(min(n, 64 * int(spec.nlist), 10_000) / 39))))
            index = faiss.IndexIVFPQ(quantizer, d, spec.nlist, spec.pq_m, nbits, metric)
        elif spec.float16:
            index = faiss.IndexIVFScalarQuantizer(quantizer, d, spec.nlist, sq16, metric)
        else:
            index = faiss.IndexIVFFlat(quantizer, d, spec.nlist, metric)
        index.cp.seed = spec.seed
        max_train = max(64 * int(spec.nlist), 10_000 if spec.kind == "ivfpq" else 0)
        if n > max_train:
            rng = np.random.default_rng(spec.seed)
            train = x[np.sort(rng.choice(n, size=max_train, replace=False))]
        else:
            train = x
        index.train(train)
        index.nprobe = spec.nprobe
    elif spec.kind == "hnsw":
        if spec.float16:
            index = faiss.IndexHNSWSQ(d, sq16, spec.hnsw_m, metric)
        else:
            index = faiss.IndexHNSWFlat(d, spec.hnsw_m, metric)
        index.hnsw.efConstruction = spec.ef_construction
        index.hnsw.efSearch = spec.ef_search
    else:  # pragma: no cover - resolved() rejects it
        raise PairkitError(f"unknown index kind {spec.kind}")
    index.add(x)
    return index


def set_search_params(index: Any, spec: IndexSpec) -> None:
    """Apply the search-time knobs (nprobe, ef_search) of ``spec`` to ``index``."""
    import faiss

    if spec.kind in ("ivf", "ivfpq") and spec.nprobe:
        ivf = faiss.extract_index_ivf(index)
        ivf.nprobe = int(spec.nprobe)
    if spec.kind == "hnsw" and spec.ef_search:
        faiss.downcast_index(index).hnsw.efSearch = int(spec.ef_search)


def to_gpu(index: Any, float16: bool = False, device: str = "cuda") -> Any:
    """Clone a CPU index onto all visible GPUs (``device`` ``cuda``), rows sharded across
    them, or onto GPU N alone (``cuda:N``).

    ``float16`` stores vectors (and IVF lists) in half precision on the GPUs.
    Returns the GPU index; HNSW has no GPU version and is returned unchanged.
    """
    import faiss

    if isinstance(faiss.downcast_index(index), faiss.IndexHNSW):
        return index
    co = faiss.GpuMultipleClonerOptions()
    co.shard = True
    co.useFloat16 = bool(float16)
    gpus = list(range(faiss_gpus()))
    if device.startswith("cuda:"):
        gpus = [int(device[5:])]
    resources = [faiss.StandardGpuResources() for _ in gpus]
    gpu_index = faiss.index_cpu_to_gpu_multiple_py(resources, index, co, gpus=gpus)
    gpu_index.referenced_objects = resources  # the GPU resources must outlive the index
    return gpu_index


def exact_index(vectors: np.ndarray, backend: SearchBackend | None = None) -> Any:
    """An exact inner-product index over ``vectors`` (N, d) on ``backend`` (default: FAISS
    on the CPU): a FAISS ``IndexFlatIP`` (cloned to the GPUs for faiss-gpu) or a
    :class:`~pairkit.index.torch_search.TorchFlatIndex`. Every exact search of pairkit
    that is not ``mine``'s main search (eval, k-means, kNN graphs) gets its index here."""
    from pairkit.index.search import flat_index

    backend = backend or CPU
    if backend.name == "torch":
        from pairkit.index.torch_search import TorchFlatIndex

        return TorchFlatIndex(vectors, device=backend.device)
    index = flat_index(vectors)
    return to_gpu(index, device=backend.device) if backend.gpu else index


@dataclass
class LoadedIndex:
    """An index ready to search, with where it came from (for summaries)."""

    index: Any
    spec: IndexSpec
    origin: str  # "built" or the path it was loaded from
    gpu: bool = False
    reason: str = ""
    cpu_index: Any = field(default=None, repr=False)
    backend: SearchBackend = CPU

    def searcher(self, vectors: np.ndarray, batch_size: int = 8192) -> Any:
        """``search(queries, k) -> (scores, ids)`` over this index, best first.

        Candidates of a lossy index (ivfpq, float16) are re-scored exactly against
        ``vectors`` (N, d) and re-sorted, so scores are always true inner products.
        """
        from pairkit.index.search import IvfListMajor, exact_scores, knn_search, sort_results

        if self.backend.name == "torch":  # exact, ties by id, any k: nothing to add
            return self.index.search
        lossy = is_lossy(self.spec)
        # many queries against IVF-Flat: list-major batches use BLAS (same results)
        target = IvfListMajor(self.index) if IvfListMajor.worthwhile(self.index) else self.index
        # PQ scores are coarse: fetch 4x the candidates, re-score exactly, keep the best k
        refine = 4 if self.spec.kind == "ivfpq" else 1

        def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            s, i = knn_search(queries, target, min(k * refine, len(vectors)),
                              batch_size=batch_size, cpu_fallback=self.cpu_index)
            if lossy:
                s, i = sort_results(exact_scores(queries, vectors, i), i)
            if s.shape[1] < k:
                pad = k - s.shape[1]
                s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
                i = np.pad(i, ((0, 0), (0, pad)), constant_values=-1)
            return s[:, :k], i[:, :k]

        return search

    def describe(self) -> str:
        where = "GPU" if self.gpu else "CPU"
        if self.backend.name == "torch":
            where = f"{self.backend.device} (torch)"
        src = "built now" if self.origin == "built" else f"loaded from {self.origin}"
        text = f"{self.spec.describe()} on {where}, {src}"
        return f"{text} ({self.reason})" if self.reason else text


def index_paths(store_root: str | os.PathLike[str], kind: str) -> tuple[Path, Path]:
    """``(STORE/index/<kind>.faiss, STORE/index/<kind>.json)``."""
    folder = Path(store_root) / INDEX_DIR
    return folder / f"{kind}.faiss", folder / f"{kind}.json"


def save_index(
    index: Any, spec: IndexSpec, store_root: str | os.PathLike[str], content_id: str,
    count: int, dim: int, force: bool = False,
) -> Path:
    """Write a CPU ``index`` and its description atomically under ``STORE/index/``.

    Holds the store's writer lock. Refuses to replace an index built for the same rows
    unless ``force``. Returns the path of the ``.faiss`` file.
    """
    import faiss

    with writer_lock(store_root, "store"):
        fpath = check_saved(store_root, spec.kind, content_id, force)
        _, jpath = index_paths(store_root, spec.kind)
        fpath.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(fpath.parent, lambda name: name.endswith((".faiss", ".json")))
        if not _is_cpu(index):
            index = faiss.index_gpu_to_cpu(index)
        with atomic_path(fpath) as tmp:
            faiss.write_index(index, str(tmp))
            with open(tmp, "rb") as fh:
                digest = sha256_fd(fh)
                size = os.fstat(fh.fileno()).st_size
                os.fsync(fh.fileno())
        meta = {
            "format": "pairkit-index",
            "kind": spec.kind,
            "spec": asdict(spec),
            "content_id": content_id,
            "count": int(count),
            "dim": int(dim),
            "metric": "inner_product",
            "faiss_version": faiss.__version__,
            "file": fpath.name,
            "bytes": size,
            "sha256": digest,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        with atomic_open(jpath) as fh:
            dump_sealed(meta, fh)
    return fpath


def build_and_save(vectors: np.ndarray, spec: IndexSpec, store_root: str | os.PathLike[str],
                   content_id: str, force: bool = False) -> Path:
    """Build ``spec`` (resolved) over ``vectors`` (N, d) and save it under the store,
    holding the store's writer lock from the check to the save. Returns the .faiss path."""
    with writer_lock(store_root, "store"):
        check_saved(store_root, spec.kind, content_id, force)
        built = build_index(vectors, spec)
        return save_index(built, spec, store_root, content_id, len(vectors), vectors.shape[1],
                          force=force)


def check_saved(store_root: str | os.PathLike[str], kind: str, content_id: str,
                force: bool) -> Path:
    """Refuse (one-line error) to replace a saved ``kind`` index built for these rows
    unless ``force``; an index of other rows is stale and may be replaced. Returns its path."""
    fpath, jpath = index_paths(store_root, kind)
    if fpath.exists() and not force:
        meta = read_index_meta(jpath)
        if meta is not None and meta.get("content_id") == content_id:
            raise PairkitError(f"index {fpath} exists; pass --force to rebuild it")
    return fpath


def saved_spec(store_root: str | os.PathLike[str], kind: str,
               content_id: str) -> IndexSpec | None:
    """The spec of the saved ``kind`` index when it was built for these rows, else None."""
    fpath, jpath = index_paths(store_root, kind)
    meta = read_index_meta(jpath)
    if meta is None or not fpath.is_file() or meta.get("content_id") != content_id:
        return None
    spec = meta.get("spec")
    fields = {k: v for k, v in (spec if isinstance(spec, dict) else {}).items()
              if k in IndexSpec.__annotations__}
    try:
        return IndexSpec(**fields)
    except TypeError:
        return None


def read_index_meta(jpath: Path) -> dict[str, Any] | None:
    """The JSON description of a saved index, or None when missing, unreadable or not
    sealed by pairkit (damaged, edited, or written by an older version)."""
    try:
        meta = read_json_file(jpath, MAX_META_BYTES, "index description")
    except (OSError, PairkitError):
        return None
    return meta if isinstance(meta, dict) and seal_ok(meta) else None


def load_index(
    store_root: str | os.PathLike[str], kind: str, content_id: str, count: int
) -> tuple[Any, IndexSpec] | None:
    """Load ``STORE/index/<kind>.faiss`` if it was built for these rows, else None.

    An index whose recorded ``content_id`` or row count differs from the store's
    (the store was rebuilt), or whose description is unsealed (older pairkit, damaged),
    is never used. The file's size and sha256 are checked against the description
    before ``faiss.read_index`` sees it; a mismatch is an error.
    """
    import faiss

    fpath, jpath = index_paths(store_root, kind)
    meta = read_index_meta(jpath)
    if meta is None or not fpath.is_file():
        return None
    if meta.get("content_id") != content_id or meta.get("count") != count:
        return None
    try:
        with open(fpath, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            ok = size == meta.get("bytes") and sha256_fd(fh) == meta.get("sha256")
    except OSError as exc:
        raise PairkitError(f"saved index {fpath} is unreadable ({exc.strerror}); rebuild it "
                           "with pairkit index --force") from None
    if not ok:
        raise PairkitError(f"saved index {fpath} does not match its checksum (damaged or "
                           "replaced): rebuild it with pairkit index --force")
    try:
        index = faiss.read_index(str(fpath))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PairkitError(f"saved index {fpath} is unreadable ({first}); rebuild it") from None
    if index.ntotal != count:
        return None
    spec = meta.get("spec")
    fields = {k: v for k, v in (spec if isinstance(spec, dict) else {}).items()
              if k in IndexSpec.__annotations__}
    try:
        return index, IndexSpec(**fields)
    except TypeError:
        return None


def _is_cpu(index: Any) -> bool:
    return "Gpu" not in type(index).__name__ and "IndexShards" not in type(index).__name__


def search_backend(backend: str | SearchBackend = "auto", device: str = "auto"
                   ) -> SearchBackend:
    """:func:`resolve_backend` of ``--backend`` and ``--device``; a resolved backend is
    returned as is."""
    if isinstance(backend, SearchBackend):
        return backend
    return resolve_backend(backend, device)


def prepare_index(
    vectors: np.ndarray,
    kind: str,
    *,
    store_root: str | os.PathLike[str] | None = None,
    content_id: str | None = None,
    exact_max_rows: int | None = None,
    nlist: int | None = None,
    nprobe: int | None = None,
    ef_search: int | None = None,
    pq_m: int | None = None,
    float16: bool = False,
    seed: int = 0,
    backend: str | SearchBackend = "auto",
    device: str = "auto",
) -> LoadedIndex:
    """Resolve ``kind`` (``auto`` too), reuse a saved index for these rows or build one.

    ``backend`` (auto, faiss, torch, or a resolved :class:`SearchBackend`) and ``device``
    (auto, cpu, cuda, cuda:N) choose the engine (:func:`search_backend`).
    The torch backend searches exactly (``kind`` flat or auto) and needs no saved index.
    Returns a :class:`LoadedIndex`; FAISS indices are placed on the GPUs when the backend
    says so.
    """
    if kind not in INDEX_CHOICES:
        raise PairkitError(f"--index must be one of {', '.join(INDEX_CHOICES)}, got {kind}")
    n, dim = vectors.shape
    where = for_index_kind(search_backend(backend, device), kind)
    if where.name == "torch":
        return _torch_index(vectors, kind, where)
    import_faiss()
    on_gpu = where.gpu
    reason = ""
    if kind == "auto":
        limit = exact_max_rows
        if limit is None:
            limit = EXACT_MAX_ROWS_GPU if on_gpu else EXACT_MAX_ROWS_CPU
        kind, reason = choose_kind(n, limit)
    spec = IndexSpec(kind=kind, nlist=nlist, nprobe=nprobe, ef_search=ef_search, pq_m=pq_m,
                     float16=float16, seed=seed)
    index = None
    origin = "built"
    if store_root is not None and content_id is not None:
        loaded = load_index(store_root, kind, content_id, n)
        if loaded is not None:
            index, saved = loaded
            # search-time knobs from the command line win over the saved ones
            spec = replace(saved, nprobe=nprobe or saved.nprobe,
                           ef_search=ef_search or saved.ef_search)
            set_search_params(index, spec)
            origin = str(index_paths(store_root, kind)[0])
    if index is None:
        spec = spec.resolved(n, dim)
        # float16 on GPU is done by the cloner; the CPU index stays float32 then
        index = build_index(vectors, replace(spec, float16=spec.float16 and not on_gpu))
    cpu_index = index
    if on_gpu:
        index = to_gpu(index, float16=spec.float16, device=where.device)
    return LoadedIndex(index=index, spec=spec, origin=origin, gpu=on_gpu and index is not
                       cpu_index, reason=reason, cpu_index=cpu_index, backend=where)


def _torch_index(vectors: np.ndarray, kind: str, where: SearchBackend) -> LoadedIndex:
    """The exact torch search over ``vectors`` as a :class:`LoadedIndex`."""
    from pairkit.index.torch_search import TorchFlatIndex

    if kind not in ("auto", "flat"):
        raise UsageError(f"the torch backend searches exactly: use --index flat or auto "
                         f"(or --backend faiss for {kind}), got --index {kind}")
    index = TorchFlatIndex(vectors, device=where.device)
    reason = f"{'auto: ' if kind == 'auto' else ''}exact search, {where.reason}".rstrip(", ")
    return LoadedIndex(index=index, spec=IndexSpec(kind="flat"), origin="built",
                       gpu=where.gpu, reason=reason, backend=where)
