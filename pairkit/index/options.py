"""How a command searches its store: one options record for ``--index``, ``--device``,
``--backend`` and the kind's knobs, and the size-based defaults it resolves to.

Kinds (all inner product; on L2-normalised rows that is cosine similarity):

- ``flat``: exact (``IndexFlatIP``).
- ``ivf``: inverted lists over k-means cells (``IndexIVFFlat``); ``nprobe`` cells
  are scanned per query. Stored vectors are exact, only the candidate set is
  approximate.
- ``ivfpq``: IVF with product-quantised codes (``IndexIVFPQ``): smallest memory,
  approximate scores (callers re-score the candidates exactly).
- ``hnsw``: graph search (``IndexHNSWFlat``), ``ef_search`` sets the beam.

``auto`` is exact up to ``exact_max_rows`` rows (50,000 on the CPU, 1,000,000 on a GPU)
and ``ivf`` above.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from pairkit.errors import UsageError

KINDS = ("flat", "ivf", "ivfpq", "hnsw")
INDEX_CHOICES = ("auto", *KINDS)
EXACT_MAX_ROWS_CPU = 50_000
EXACT_MAX_ROWS_GPU = 1_000_000
# the fields that decide what a built index holds (recorded with a saved index)
BUILD_FIELDS = ("kind", "nlist", "nprobe", "pq_m", "hnsw_m", "ef_construction", "ef_search",
                "float16", "seed")
# the option that sets each build field, as messages name it (ef_construction has none:
# the Python API's name)
FIELD_OPTIONS = {"kind": "--index", "nlist": "--nlist", "nprobe": "--nprobe", "pq_m": "--pq-m",
                 "hnsw_m": "--hnsw-m", "ef_construction": "ef_construction",
                 "ef_search": "--ef-search", "float16": "--dtype", "seed": "--seed"}


def field_difference(name: str, saved: Any, asked: Any) -> str:
    """``--hnsw-m 32, asked for 8``, ``--dtype float32, asked for float16``: a build field
    by its option and its values as typed."""
    if name == "float16":
        saved, asked = ("float16" if v else "float32" for v in (saved, asked))
    return f"{FIELD_OPTIONS[name]} {saved}, asked for {asked}"


@dataclass(frozen=True)
class IndexOptions:
    """What index to search with and where. ``None`` fields get size-based defaults
    (:meth:`resolved`); ``kind`` ``auto`` is chosen by row count when the index opens
    (:func:`pairkit.index.open.open_searcher`).

    ``exact_max_rows``: ``auto`` is exact up to this many rows (None: by device).
    ``batch_size``: queries per search call. ``backend``: ``auto``, ``faiss`` or
    ``torch`` (:mod:`pairkit.index.backend`); ``device``: ``auto``, ``cpu``, ``cuda``,
    ``cuda:N``. ``float16``: the index's vectors in float16 (``--dtype float16``), False:
    float32 as asked (``--dtype float32``: a saved float16 index is not used), None: not
    asked (float32 when built; a saved float16 index is used as it is).
    """

    kind: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    pq_m: int | None = None
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int | None = None
    float16: bool | None = None
    seed: int = 0
    exact_max_rows: int | None = None
    batch_size: int = 8192
    backend: str = "auto"
    device: str = "auto"

    def check_knobs(self) -> None:
        """UsageError for a knob of another kind given with an explicit kind (it would
        build nothing; with ``auto`` the kind is chosen by size, so every kind's knobs may
        apply) and a seed FAISS's k-means can't take. The commands' check of what the user
        gave (the resolved options of a run may carry any knob)."""
        default = IndexOptions.__dataclass_fields__
        knobs = (("--nlist", "nlist", ("ivf", "ivfpq"), "ivf or ivfpq"),
                 ("--nprobe", "nprobe", ("ivf", "ivfpq"), "ivf or ivfpq"),
                 ("--pq-m", "pq_m", ("ivfpq",), "ivfpq"),
                 ("--ef-search", "ef_search", ("hnsw",), "hnsw"),
                 ("--hnsw-m", "hnsw_m", ("hnsw",), "hnsw"),
                 ("--ef-construction", "ef_construction", ("hnsw",), "hnsw"))
        for flag, name, kinds, which in knobs:
            if (self.kind in KINDS and self.kind not in kinds
                    and getattr(self, name) != default[name].default):
                raise UsageError(f"{flag} applies to --index {which} (or auto), not "
                                 f"{self.kind}")
        if self.kind in ("ivf", "ivfpq") and not 0 <= self.seed < 2**31:
            raise UsageError(f"--seed must be < 2**31 for an IVF index (FAISS's k-means "
                             f"seed is a 32-bit int), got {self.seed}")

    def cpu_kind(self, n: int) -> str:
        """The kind of index these options build over ``n`` rows on the CPU: ``kind``, with
        ``auto`` resolved by :func:`choose_kind` (exact up to ``exact_max_rows``, None:
        :data:`EXACT_MAX_ROWS_CPU`), as :func:`pairkit.index.open.open_searcher` does."""
        if self.kind != "auto":
            return self.kind
        limit = EXACT_MAX_ROWS_CPU if self.exact_max_rows is None else self.exact_max_rows
        return choose_kind(n, limit)[0]

    def resolved(self, n: int, dim: int) -> IndexOptions:
        """These options with every size-dependent default filled in for ``n`` rows of
        ``dim`` (``kind`` must be one of :data:`KINDS`)."""
        if self.kind not in KINDS:
            raise UsageError(f"--index must be one of {', '.join(KINDS)}, got {self.kind}")
        # the knobs of other kinds back to their defaults: they build nothing here, so a
        # saved index neither records nor compares them
        default = IndexOptions()
        spec = replace(self, float16=bool(self.float16))
        if self.kind not in ("ivf", "ivfpq"):
            spec = replace(spec, nlist=None, nprobe=None, seed=default.seed)
        if self.kind != "ivfpq":
            spec = replace(spec, pq_m=None)
        if self.kind != "hnsw":
            spec = replace(spec, hnsw_m=default.hnsw_m, ef_search=None,
                           ef_construction=default.ef_construction)
        if self.kind in ("ivf", "ivfpq"):
            nlist = self.nlist or default_nlist(n)
            nlist = max(1, min(nlist, n))
            nprobe = self.nprobe or default_nprobe(nlist)
            spec = replace(spec, nlist=nlist, nprobe=max(1, min(nprobe, nlist)))
        if self.kind == "ivfpq":
            spec = replace(spec, pq_m=self.pq_m or default_pq_m(dim))
            if dim % spec.pq_m:  # type: ignore[operator]
                raise UsageError(f"--pq-m must divide the store dim {dim}, got {spec.pq_m}")
        if self.kind == "hnsw":
            if self.hnsw_m < 2:  # FAISS's HNSW ends the process (assertion, segfault)
                raise UsageError(f"--hnsw-m must be >= 2, got {self.hnsw_m}")
            spec = replace(spec, ef_search=self.ef_search or 128)
        return spec

    def differences(self, other: IndexOptions) -> str:
        """The build fields on which ``other`` differs, by their options, e.g. ``--nlist 2,
        asked for 3`` (:func:`field_difference`)."""
        mine, theirs = self.build_fields(), other.build_fields()
        return "; ".join(field_difference(k, mine[k], theirs[k])
                         for k in BUILD_FIELDS if mine[k] != theirs[k])

    def asked_otherwise(self, saved: IndexOptions, n: int, dim: int) -> str:
        """The build fields set here away from their defaults (the user asked for them)
        on which the ``saved`` index differs, e.g. ``--nlist 2, asked for 4``; empty when
        the saved index is what was asked (its other fields are free to differ)."""
        default = IndexOptions()
        asked = self.resolved(n, dim)
        out = []
        for name in ("nlist", "pq_m", "hnsw_m", "ef_construction", "float16"):
            if getattr(self, name) != getattr(default, name) \
                    and getattr(saved, name) != getattr(asked, name):
                out.append(field_difference(name, getattr(saved, name), getattr(asked, name)))
        return "; ".join(out)

    def describe(self, on_gpu: bool | None = None) -> str:
        """Short human description, e.g. ``ivf(nlist=447, nprobe=28)``; ``on_gpu``: where
        the index searches (None: not known, a saved index). ``ivfpq`` stores PQ codes
        whatever the dtype: float16 is only its GPU copy's lookup tables (FAISS's
        ``useFloat16``), so it is said so, and not at all on the CPU."""
        parts = []
        if self.kind in ("ivf", "ivfpq"):
            parts += [f"nlist={self.nlist}", f"nprobe={self.nprobe}"]
        if self.kind == "ivfpq":
            parts.append(f"m={self.pq_m}")
        if self.kind == "hnsw":
            parts += [f"M={self.hnsw_m}", f"ef_search={self.ef_search}"]
        if self.float16 and self.kind == "ivfpq":
            if on_gpu is not False:
                parts.append("float16 lookup tables" + ("" if on_gpu else " on the GPU"))
        elif self.float16:
            parts.append("float16")
        return f"{self.kind}({', '.join(parts)})" if parts else self.kind

    @property
    def lossy(self) -> bool:
        """True when the index returns approximate scores (callers re-score)."""
        return self.kind == "ivfpq" or bool(self.float16)

    def build_fields(self) -> dict[str, Any]:
        """The :data:`BUILD_FIELDS` (what a saved index records as its ``spec``)."""
        values = asdict(self)
        return {k: values[k] for k in BUILD_FIELDS}

    @classmethod
    def from_build_fields(cls, fields: Any) -> IndexOptions | None:
        """Options from a saved index's ``spec`` record (unknown keys ignored); None when
        it is not a record of valid fields."""
        known = {k: v for k, v in (fields if isinstance(fields, dict) else {}).items()
                 if k in BUILD_FIELDS}
        try:
            return cls(**known)
        except TypeError:
            return None


def index_seed(seed: int) -> int:
    """A run's ``--seed`` as the seed of its IVF training (FAISS's k-means seed is a
    32-bit int): the seed itself below 2**31, else folded into that range."""
    return seed if seed < 2**31 else (seed ^ (seed >> 31)) % 2**31


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
