"""The Python API: the functions behind the commands, for notebooks and training scripts.

Every function here is what the command of the same job calls (``pairkit embed`` ->
:func:`embed_images`, ``mine`` -> :func:`mine_pairs`, ...), with the same defaults (but
``mine_pairs``' ``hard=True``) and the same checks; they return numpy arrays, pandas
DataFrames and dicts instead of writing files, and raise
:class:`pairkit.errors.PairkitError` (``UsageError`` for a bad option) with the one-line
reason the command would print. ``import pairkit`` loads none of this until a name is
used (``pairkit/__init__.py``). Examples: docs/api.md.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit.errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from pairkit.core.store import Store
    from pairkit.train.config import TrainResult


def _open(store: Store | str | os.PathLike[str]) -> Store:
    from pairkit.core.store import Store

    return store if isinstance(store, Store) else Store.open(store)


def _root(store: Store | str | os.PathLike[str]) -> Any:
    """A store's folder (or ``s3://`` URL) as the commands take it."""
    from pairkit.core.store import Store

    return store.root if isinstance(store, Store) else store


def _split_options(options: dict[str, Any], *classes: type,
                   given_as: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``options`` split by the dataclass whose field each names; UsageError for others,
    and for a value of the wrong type or out of the command's range (:func:`_check_value`),
    naming the option as the caller gave it (``given_as``: field -> that name)."""
    out: list[dict[str, Any]] = [{} for _ in classes]
    for key, value in options.items():
        for n, cls in enumerate(classes):
            field = next((f for f in fields(cls) if f.name == key), None)
            if field is not None:
                name = (given_as or {}).get(key, key)
                out[n][key] = _check_value(name, str(field.type), value)
                break
        else:
            known = sorted({f.name for cls in classes for f in fields(cls)})
            raise UsageError(f"unknown option {key!r} (known: {', '.join(known)})")
    return out


# numbers.Integral / Real: numpy's integers and floats are as good as Python's
_SCALARS: dict[str, tuple[type, ...]] = {"int": (numbers.Integral,), "float": (numbers.Real,),
                                        "str": (str,), "bool": (bool,)}


def _alternatives(kind: str) -> list[str]:
    """The members of the annotation ``kind``'s top-level union: ``"str | os.PathLike[str]
    | None"`` -> ``["str", "os.PathLike[str]", "None"]`` (a ``|`` inside brackets stays)."""
    out, depth, start = [], 0, 0
    for n, char in enumerate(kind):
        depth += char == "["
        depth -= char == "]"
        if char == "|" and depth == 0:
            out.append(kind[start:n].strip())
            start = n + 1
    return [*out, kind[start:].strip()]


def _element(kind: str) -> str | None:
    """``"tuple[int, ...]"`` / ``"Sequence[int]"`` -> ``"int"``; None for another kind."""
    for head, tail in (("tuple[", ", ...]"), ("Sequence[", "]")):
        if kind.startswith(head) and kind.endswith(tail):
            return kind[len(head):-len(tail)]
    return None


def _is_list(value: Any) -> bool:
    return not isinstance(value, (str, bytes)) and hasattr(value, "__iter__") \
        and not isinstance(value, Mapping)


def _matches(kind: str, value: Any) -> bool | None:
    """Whether ``value`` is of the single (non-union, non-list) annotation ``kind``; None
    for a kind this check does not know (``Any``, ``Path`` ...): anything goes."""
    want = _SCALARS.get(kind)
    if want is not None:  # a bool is not a number
        return isinstance(value, want) and isinstance(value, bool) == (kind == "bool")
    if kind == "None":
        return value is None
    if kind.startswith("os.PathLike"):
        return isinstance(value, os.PathLike)
    if kind.startswith("Callable"):
        return callable(value)
    if kind.startswith("dict["):
        return isinstance(value, Mapping)
    if kind == "Store":
        from pairkit.core.store import Store

        return isinstance(value, Store)
    if kind == "pd.DataFrame":
        import pandas as pd

        return isinstance(value, pd.DataFrame)
    return None


def _describe(kind: str, article: bool = True) -> str:
    """How an error names the annotation ``kind``: "an int", "a list of str", "None"."""
    inner = _element(kind)
    if inner is not None:
        return "a list" + (f" of {' or '.join(_describe(k, False) for k in _alternatives(inner))}"
                           if any(_matches(k, 0) is not None for k in _alternatives(inner))
                           else "")
    name = {"pd.DataFrame": "DataFrame", "Callable": "callable", "dict": "dict",
            "os.PathLike": "os.PathLike"}.get(kind.partition("[")[0], kind)
    if not article or name == "None":
        return name
    return ("an " if name[0] in "aeiouAEIO" else "a ") + name


def _check_value(key: str, kind: str, value: Any) -> Any:
    """``value`` of the option or parameter ``key`` annotated ``kind`` ("int", "float |
    None", "tuple[int, ...]", "str | os.PathLike[str] | None", "Sequence[int] | int" ...):
    numbers as Python's and a list (any iterable but a string) as a tuple. UsageError for
    another type (a bool is not a number, a string not a list: "resume must be a bool, got
    'no'") or for what the command refuses (NaN, below its minimum:
    :func:`pairkit.core.options.check_value`). A kind this does not know (``Any``,
    ``Path``) takes anything."""
    from pairkit.core.options import check_value

    kinds = _alternatives(kind)
    singles = [k for k in kinds if _element(k) is None]
    lists = [k for k in kinds if _element(k) is not None]
    if any(_matches(k, value) is None for k in singles):
        return value
    for k in singles:
        if _matches(k, value):
            if k in ("int", "float"):
                value = _plain(k, value)
                check_value("--" + key.replace("_", "-"), value)
            return value
    if lists and _is_list(value):
        items = tuple(value)
        for k in lists:
            inner = _alternatives(_element(k) or "")
            if all(any(_matches(i, v) is not False for i in inner) for v in items):
                return tuple(_plain(next(i for i in inner if _matches(i, v) is not False), v)
                             for v in items)
        raise UsageError(f"{key} must be {_describe(lists[0])}, got {_brief(list(items))}")
    if lists and (not singles or singles == ["None"]):
        raise UsageError(f"{key} must be a list, got {_brief(value)}")
    last = singles[-1:] if singles[-1:] == ["None"] else []  # "... or None" comes last
    named = [_describe(k) for k in (*singles[:len(singles) - len(last)], *lists, *last)]
    wanted = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
    raise UsageError(f"{key} must be {wanted}, got {_brief(value)}")


def _brief(value: Any) -> str:
    """``value`` for a one-line message: its repr when that is short and one line, else
    what it is (a DataFrame or an array is not printed whole)."""
    text = repr(value)
    if len(text) <= 80 and "\n" not in text:
        return text
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        return f"a {type(value).__name__} of shape {shape}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} values"
    return f"a {type(value).__name__}"


def _checked(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` with its declared parameters checked against their annotations
    (:func:`_check_value`) before it runs, as ``**options`` are checked against the
    config's fields: every API function's one check of what it was given."""
    import functools
    import inspect

    signature = inspect.signature(func)

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:  # an argument given twice, a missing one, one too many
            raise UsageError(f"{func.__name__}: {exc}") from None
        for name, value in bound.arguments.items():
            param = signature.parameters[name]
            if param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                bound.arguments[name] = _check_value(name, str(param.annotation), value)
        return func(*bound.args, **bound.kwargs)

    return checked


def _plain(kind: str, value: Any) -> Any:
    """A numpy integer or float as Python's (what FAISS, torch and JSON take)."""
    return int(value) if kind == "int" else float(value) if kind == "float" else value


@_checked
def open_store(path: str | os.PathLike[str], verify: bool = True) -> Store:
    """Open the last committed snapshot of the store at ``path``.

    ``store.vectors()`` is the (N, dim) float32 array of L2-normalised embeddings,
    ``store.items`` the item table (id, path, source, view, label, file_sha256),
    ``store.labels()`` an object (N,) array or None. ``verify`` checks every file's
    sha256 now (as the commands do).
    """
    from pairkit.core.store import Store

    return Store.open(path, verify=verify)


@_checked
def embed_images(images: str | os.PathLike[str], store: str | os.PathLike[str], *,
                 model: str = "openclip/ViT-B-32", progress: Any = None,
                 **options: Any) -> Store:
    """Embed an image folder (or webdataset tar shards, or a Hugging Face dataset saved
    with ``save_to_disk`` / parquet or arrow files) into the store folder ``store`` and
    return it opened; a rerun embeds only what is missing (``pairkit embed``).

    ``options`` are :class:`pairkit.encode.embedder.EmbedConfig` fields: ``views``,
    ``seed``, ``labels`` ("folder" or a table path), ``device``, ``precision``,
    ``batch_size``, ``workers``, ``dtype``, ``decode``, ``force``, ``pretrained``,
    ``checkpoint``, ``image_column``, ``label_column`` ... ``progress``: an object with
    the :class:`pairkit.encode.embedder.ProgressHook` methods (None: silent).
    """
    from pairkit.encode.embedder import EmbedConfig, embed_folder

    if isinstance(options.get("labels"), os.PathLike):  # a table's path, as elsewhere
        options["labels"] = os.fspath(options["labels"])
    hook = ("start", "advance", "note")
    if progress is not None and not all(callable(getattr(progress, m, None)) for m in hook):
        raise UsageError(f"progress must have the methods {', '.join(hook)} "
                         f"(pairkit.encode.embedder.ProgressHook), got {progress!r}")
    (kw,) = _split_options(options, EmbedConfig)
    if kw.get("checkpoint") is not None:
        kw["checkpoint"] = str(kw["checkpoint"])
    # as the command passes them: strings, so a URL (s3://, file://) stays one
    embed_folder(EmbedConfig(images=os.fspath(images), store=os.fspath(store),  # type: ignore[arg-type]
                             model=model, **kw), progress)
    return open_store(store)


@_checked
def mine_pairs(store: Store | str | os.PathLike[str], *, hard: bool = True,
               relation: str | None = None, format: str = "triplet",
               filter_false_negatives: bool = False,
               fn_rules: str | Sequence[str] | None = None,
               fn_options: dict[str, Any] | None = None,
               positives: int | None = None, positive_neighbours: int | None = None,
               positive_whitening: float | None = None, as_dataset: bool = False,
               **options: Any) -> pd.DataFrame | Any:
    """Mine anchor / positive / negative rows from a store (``pairkit mine``).

    Returns the pair table as a DataFrame (columns of docs/formats.md#pair-tables; the
    summary ``pairkit mine --stats`` writes is in ``table.attrs["stats"]``), or a
    ``datasets.Dataset`` with ``as_dataset`` (:func:`pairs_to_dataset`).
    ``options``: :class:`pairkit.mine.config.MineConfig` fields (``num_negatives``,
    ``range_min``, ``sampling``, ``positive``, ``seed``, ``fn_mode`` ...) and
    :class:`pairkit.index.options.IndexOptions` fields (``kind``, ``nprobe``,
    ``device``, ``backend`` ...). ``fn_rules`` ("label,near-duplicate,mutual-neighbour,cluster") and
    ``fn_options`` (:class:`pairkit.mine.false_negatives.FalseNegativeConfig` fields)
    apply with ``filter_false_negatives``. ``positives`` (mined positives per anchor, rows
    ``positive_kind = "mined"``; default 10 with ``filter_false_negatives``, else 0) and
    ``positive_neighbours`` (default 10) and ``positive_whitening`` (0.25) are ``mine
    --positives`` / ``--positive-neighbours`` / ``--positive-whitening``. Without ``hard``
    the options of the hard search (``range_min``, ``sampling``, ``kind``, ``nprobe`` ...)
    are refused, as the command refuses them without ``--hard``.
    """
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_store
    from pairkit.mine.config import MineConfig, fn_config, positive_config
    from pairkit.mine.false_negatives import FalseNegativeConfig

    if not filter_false_negatives and (fn_rules is not None or fn_options):
        raise UsageError("fn_rules and fn_options need filter_false_negatives=True")
    if isinstance(fn_rules, tuple):
        fn_rules = ",".join(fn_rules)
    options = dict(options)
    if "dtype" in options:  # the command's --dtype float16|float32: the field float16
        if "float16" in options:
            raise UsageError("dtype and float16 are one option: give one")
        dtype = options.pop("dtype")
        if dtype not in ("float16", "float32"):
            raise UsageError(f"dtype must be float16 or float32, got {dtype!r}")
        options["float16"] = dtype == "float16"
    options, given_as = _by_field(options, MINE_NAMES)
    mine_kw, index_kw = _split_options(options, MineConfig, IndexOptions, given_as=given_as)
    if not hard:
        for key in HARD_ONLY:
            if key in mine_kw or key in index_kw:
                raise UsageError(f"{given_as.get(key, key)} needs hard=True (it shapes the "
                                 "hard search)")
    if not filter_false_negatives and mine_kw.get("fn_mode", "eliminate") != "eliminate":
        raise UsageError(f"fn_mode={mine_kw['fn_mode']!r} needs filter_false_negatives=True")
    if "sampling_temperature" in mine_kw and mine_kw.get("sampling") != "softmax":
        raise UsageError("sampling_temperature applies to sampling='softmax'")
    fn_kw = dict(fn_options or {})
    cluster_k = fn_kw.pop("cluster_k", None)
    if "rules" in fn_kw:  # the field fn_rules fills: one option, given either way
        if fn_rules is not None:
            raise UsageError("fn_rules and fn_options' rules are one option: give one")
        fn_rules = _check_value("rules", "str | Sequence[str]", fn_kw.pop("rules"))
        if isinstance(fn_rules, tuple):
            fn_rules = ",".join(fn_rules)
    (fn_kw,) = _split_options(fn_kw, FalseNegativeConfig)
    fn = fn_config(filter_false_negatives, fn_rules, None if cluster_k is None
                   else ",".join(map(str, cluster_k)) if isinstance(cluster_k, (list, tuple))
                   else str(cluster_k), **fn_kw)
    index = IndexOptions(**index_kw)
    index.check_knobs()
    table, stats = mine_store(_open(store), relation, MineConfig(hard=hard, **mine_kw),
                              index, fn, format,
                              positives=positive_config(positives, positive_neighbours, fn,
                                                        positive_whitening))
    table.attrs["stats"] = stats
    return pairs_to_dataset(table) if as_dataset else table


# the options only the hard search reads (``mine`` refuses them without --hard); the
# device and backend stay: the rules' searches use them on any run
HARD_ONLY = ("range_min", "range_max", "sampling", "sampling_temperature", "kind", "nlist",
             "nprobe", "pq_m", "hnsw_m", "ef_construction", "ef_search", "exact_max_rows",
             "float16")


def _by_field(options: dict[str, Any], names: dict[str, str]
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """``options`` keyed by the config's field names (``names``: the command's name ->
    the field), and each field -> the name it was given as. UsageError for a field given
    by both its names (one of them would have been dropped)."""
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in options.items():
        field = names.get(key, key)
        if field in out:
            raise UsageError(f"{given_as[field]} and {key} are one option: give one")
        out[field], given_as[field] = value, key
    return out, given_as


# mine's options by the command's names -> MineConfig's / IndexOptions' fields (--dtype
# float16 is the bool float16: mine_pairs maps it)
MINE_NAMES = {"index": "kind"}

# eval's options by the command's names -> EvalConfig's fields
EVAL_NAMES = {"knn_k": "knn_ks", "recall_k": "recall_ks", "retrieval_gallery": "gallery",
              "batch_size": "block_rows"}


@_checked
def find_duplicates(store: Store | str | os.PathLike[str], *,
                    threshold: float | None = None, keep: str = "best",
                    exact_only: bool = False, drop: bool = False,
                    against: Store | str | os.PathLike[str] | None = None,
                    warn: Callable[[str], None] | None = None,
                    **options: Any) -> pd.DataFrame:
    """Exact and near-duplicate groups of a store's sources (``pairkit dedup``).

    Returns one row per source in a group: group, id, path, keep (bool), similarity,
    match (keep | exact | near), keep_reason (why the kept row was kept; None on the others)
    (docs/dedup.md#output); the summary is in ``table.attrs["summary"]``. ``drop``: only
    the rows to remove. ``against``: another store (``dedup --against``, a train/test
    leak check): one row per source of ``store`` that duplicates one of its sources
    (id, path, other_id, other_path, similarity, match; ``keep`` and ``drop`` don't
    apply). ``options``: :class:`pairkit.mine.dedup.DedupConfig` fields (``batch_size``,
    ``device``, ``backend``, ``absolute``, ``method``, ``pixel_threshold``).
    """
    from pairkit.mine.dedup import DEFAULT_KEEP, DedupConfig, run_against, run_dedup

    (kw,) = _split_options(options, DedupConfig)
    cfg = DedupConfig(threshold=threshold, keep=keep, exact_only=exact_only, **kw)
    if against is not None:
        if drop or keep != DEFAULT_KEEP:
            raise UsageError(f"{'drop' if drop else 'keep'} does not apply to against: every "
                             "row is a leak")
        table, summary = run_against(_root(store), cfg, _root(against),
                                     warn or (lambda _: None))
        table.attrs["summary"] = summary
        return table
    table, summary = run_dedup(_root(store), cfg, warn or (lambda _: None))
    if drop:
        table = table[~table["keep"]].reset_index(drop=True)
    table.attrs["summary"] = summary
    return table


@_checked
def find_issues(store: Store | str | os.PathLike[str], *,
                checks: str | Sequence[str] | None = None, k: int = 10,
                outlier_z: float = 3.5, all_rows: bool = False) -> pd.DataFrame:
    """Outliers and likely label errors among a store's sources (``pairkit issues``, one
    row per source: its lowest view). ``checks``: "outlier", "label-error" (a list or the
    command's comma string; None: both on a labelled store, outlier alone on another).

    Returns the flagged rows (every row with ``all_rows``): id, path, label, issue, score,
    flagged, suggested_label, reason (docs/issues.md); the counts are in
    ``table.attrs["summary"]``.
    """
    from pairkit.eval.data_issues import IssuesConfig
    from pairkit.eval.issues_command import issues_table

    if isinstance(checks, str):
        checks = [c.strip() for c in checks.split(",") if c.strip()]
    cfg = IssuesConfig(k=k, checks=None if checks is None else tuple(checks),
                       outlier_z=outlier_z, all_rows=all_rows)
    table, summary, _, _ = issues_table(_root(store), cfg)
    table.attrs["summary"] = summary
    return table


@_checked
def import_embeddings(embeddings: str | os.PathLike[str], items: str | os.PathLike[str],
                      output: str | os.PathLike[str], *, dtype: str = "float16",
                      encoder: str = "imported", force: bool = False) -> Store:
    """Write embeddings computed elsewhere (a ``.npy`` file of an (N, dim) array) with
    their item table (a table file with a ``path`` column; ``source``, ``view``,
    ``label``, ``file_sha256`` optional) as a store at ``output`` and return it opened
    (``pairkit import``, docs/import.md). ``encoder``: the name recorded for the vectors."""
    from pairkit.core.importer import import_embeddings as run_import

    return run_import(embeddings, items, output, dtype=dtype, encoder=encoder, force=force)


@_checked
def project_store(store: Store | str | os.PathLike[str], head: str | os.PathLike[str],
                  output: str | os.PathLike[str], *, force: bool = False,
                  **options: Any) -> Store:
    """The store projected through a trained head (``pairkit project``): a new store at
    ``output`` with the same items and the head's outputs as vectors, returned opened.
    ``options``: :class:`pairkit.train.project_command.ProjectConfig` fields (``device``,
    ``batch_size``, ``dtype``)."""
    from pairkit.core.store import Store
    from pairkit.train.project_command import ProjectConfig, project_to_files

    (kw,) = _split_options(options, ProjectConfig)
    project_to_files(_root(store), output, ProjectConfig(head=head, **kw), force=force)
    return Store.open(output, verify=False)


@_checked
def train_head(store: Store | str | os.PathLike[str], output: str | os.PathLike[str],
               pairs: str | os.PathLike[str] | pd.DataFrame | None = None, *, resume: bool = False,
               force: bool = False, **options: Any) -> TrainResult:
    """Train a contrastive head on a store's embeddings into the folder ``output``
    (``pairkit train``): pairs from a pair table (a DataFrame from :func:`mine_pairs` or
    a path), else ``relation="instance"|"label"`` with in-batch negatives.

    ``options``: :class:`pairkit.train.config.TrainConfig` fields (``head``, ``out_dim``,
    ``epochs``, ``batch_size``, ``lr``, ``device``, ``fn_mode``, ``relation`` ...) and
    :class:`pairkit.train.losses.LossConfig` fields (``loss`` names it: infonce,
    triplet, supcon, debiased, hard; ``temperature``, ``margin`` ...). Returns the
    :class:`pairkit.train.config.TrainResult` (``records``: one dict per epoch); the head
    itself: :func:`load_head`.
    """
    from pairkit.train.command import train_to_files
    from pairkit.train.config import TrainConfig
    from pairkit.train.losses import LossConfig

    options = dict(options)
    if "loss" in options:
        if "name" in options:
            raise UsageError("name and loss are one option: give one")
        options["name"] = options.pop("loss")
    if isinstance(options.get("pair_whitening"), str):  # the command's --pair-whitening all
        if options["pair_whitening"] != "all":
            raise UsageError(f"pair_whitening must be an int, None or 'all', got "
                             f"{options['pair_whitening']!r}")
        options["pair_whitening"] = None
    train_kw, loss_kw = _split_options(options, TrainConfig, LossConfig)
    cfg = TrainConfig(loss=LossConfig(**loss_kw), **train_kw)
    return train_to_files(store, output, cfg, pairs=pairs, resume=resume, force=force)


@_checked
def load_head(path: str | os.PathLike[str]) -> Any:
    """A trained head (:class:`pairkit.train.head.Head`): ``head.apply(vectors)`` maps
    (n, in_dim) embeddings to L2-normalised (n, out_dim) float32."""
    from pairkit.train.head import load_head as load

    return load(path)


@_checked
def evaluate(store: Store | str | os.PathLike[str], *,
             against: Store | str | os.PathLike[str] | None = None,
             test_fraction: float | None = None,
             head: str | os.PathLike[str] | None = None, compare: bool = False,
             metrics: str | Sequence[str] | None = None,
             plot: str | os.PathLike[str] | None = None,
             maps: str | Sequence[str] = ("pca",), force: bool = False,
             include_same_source: bool | None = None,
             **options: Any) -> pd.DataFrame:
    """kNN, linear probe, retrieval and alignment / uniformity of a store (``pairkit
    eval``): a held-out fraction of its sources (``test_fraction``, 0.2 by default) or
    the store ``against`` as queries.

    Returns a DataFrame indexed by metric name (the keys of ``pairkit eval --json``),
    one column per run: ``raw`` and/or ``head`` (``compare`` puts both). ``plot``: a
    folder for the PNG histograms and 2-D maps (``maps``: "pca", "umap"). ``options``:
    :class:`pairkit.eval.run.EvalConfig` fields (``knn_ks``, ``recall_ks``, ``seed``,
    ``device`` ...), also by the command's names (``knn_k``, ``recall_k``,
    ``retrieval_gallery``, ``batch_size``, ``include_same_source``).
    """
    import pandas as pd

    from pairkit.core.options import parse_choices
    from pairkit.eval.command import eval_to_files
    from pairkit.eval.run import METRICS, EvalConfig

    if compare and head is None:
        raise UsageError("compare needs head")
    if against is not None and test_fraction is not None:
        raise UsageError("test_fraction splits the store; against gives the queries: pick one")
    options, given_as = _by_field(options, EVAL_NAMES)
    if include_same_source is not None:  # the command's flag, the config's inverse
        if "exclude_same_source" in options:
            raise UsageError("include_same_source and exclude_same_source are one option: "
                             "give one")
        options["exclude_same_source"] = not include_same_source
    (kw,) = _split_options(options, EvalConfig, given_as=given_as)
    kw.setdefault("collect_scores", True)  # as the command: the score histograms
    if isinstance(metrics, tuple):
        metrics = ",".join(metrics)
    cfg = EvalConfig(metrics=parse_choices(metrics, METRICS, "metrics"), **kw)
    # as the command reads --map: a str is its comma list ("pca,umap", "all"), a list
    # the same names
    from pairkit.eval.plots import parse_maps

    maps = parse_maps(maps if isinstance(maps, str) else ",".join(maps), plot is not None,
                      "maps", "plot")
    results, _ = eval_to_files(
        _root(store), None if plot is None else Path(plot), cfg,
        against=None if against is None else _root(against),
        test_fraction=0.2 if test_fraction is None else test_fraction,
        head=None if head is None else Path(head), compare=compare, maps=tuple(maps),
        force=force)
    return pd.DataFrame({name: pd.Series(values, dtype=object)
                         for name, values in results.items()})


@_checked
def search(store: Store | str | os.PathLike[str],
           images: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = (),
           ids: int | Sequence[int] = (), texts: str | Sequence[str] = (), *, k: int = 10,
           include_same_source: bool = False, device: str = "auto",
           checkpoint: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Nearest neighbours in a store of image files (embedded with the store's encoder),
    item ids, or texts (open_clip stores only) (``pairkit search``).

    Returns one row per (query, neighbour): store_id, query, query_kind (image | item |
    text), rank (0 = nearest), id, score (cosine), path, source, label. An item query leaves
    out its own source unless ``include_same_source``. ``checkpoint``: the weights file
    of a store embedded with ``--checkpoint`` (its sha256 must match). A single path, id
    or text is one query.
    """
    from pairkit.core.devices import check_device
    from pairkit.index.query import QueryRequest, search_store

    images = (images,) if isinstance(images, (str, os.PathLike)) else images
    texts = (texts,) if isinstance(texts, str) else texts
    ids = (ids,) if isinstance(ids, int) else ids
    check_device(device)
    for path in images:
        if not Path(path).is_file():
            raise UsageError(f"query image {os.fspath(path)} not found")
    return search_store(_open(store), QueryRequest(
        images=tuple(str(p) for p in images), ids=tuple(ids),
        texts=tuple(str(t) for t in texts), k=k, include_same_source=include_same_source,
        device=device,
        checkpoint=None if checkpoint is None else str(checkpoint)))


@_checked
def store_info(store: Store | str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """What ``pairkit info`` prints, as a dict: counts, encoder, dims, views, labels,
    sizes, format version and whether every checksum holds (``verify``)."""
    from pairkit.core.info import store_info as info

    return info(_root(store), verify=verify)


@_checked
def pairs_to_dataset(table: pd.DataFrame | str | os.PathLike[str],
                     store: Store | str | os.PathLike[str] | None = None, *,
                     images: str = "paths") -> Any:
    """A pair table (a DataFrame or a table's path) as a ``datasets.Dataset`` (``pip install
    datasets``): its columns, and
    with ``images="bytes"`` (needs ``store``) the image bytes of each path column
    (anchor_path -> anchor_image ...), read from the store's image root."""
    from pairkit.train.pair_data import to_hf_dataset

    return to_hf_dataset(table, None if store is None else _open(store), images=images)


class _Default(int):
    """An int default that a caller's equal value is not (``is``): what the function passes
    on only when the caller gave it."""


_BATCH_SIZE = _Default(32)


@_checked
def pair_loader(table: pd.DataFrame | str | os.PathLike[str],
                store: Store | str | os.PathLike[str], *,
                transform: Callable[[Any], Any] | None = None, negatives: int | None = None,
                batch_size: int | None = _BATCH_SIZE, shuffle: bool | None = None,
                num_workers: int = 0, **loader_options: Any) -> Any:
    """A torch ``DataLoader`` of (anchor, positive, negatives) images from a pair table
    and the store's image root: ``transform`` maps a PIL image to a tensor (default:
    ``torchvision.transforms.functional.to_tensor``); negatives come stacked as
    (batch, n_negatives, ...): ``negatives`` per example (None: the fewest any example
    has). See :class:`pairkit.train.pair_data.PairImages`. ``batch_size`` 32 and
    ``shuffle`` (None: on) unless given, but for a ``batch_sampler`` (which sets the
    batches: neither is passed) or a ``sampler`` (which sets the order: ``shuffle`` is not
    passed); ``batch_size=None`` turns batching off, as in ``DataLoader``."""
    import inspect

    from torch.utils.data import DataLoader

    from pairkit.train.pair_data import PairImages, loader

    known = set(inspect.signature(DataLoader).parameters) - {"dataset"}
    unknown = sorted(set(loader_options) - known)
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r} (DataLoader's: "
                         f"{', '.join(sorted(known))})")
    sampled = any(loader_options.get(k) is not None for k in ("sampler", "batch_sampler"))
    options = dict(loader_options, num_workers=num_workers)
    if shuffle is not None or not sampled:
        options["shuffle"] = True if shuffle is None else shuffle
    if batch_size is not _BATCH_SIZE or loader_options.get("batch_sampler") is None:
        options["batch_size"] = None if batch_size is None else int(batch_size)
    data = PairImages(table, _open(store), transform=transform, negatives=negatives)
    return loader(data, **options)


@_checked
def vectors(store: Store | str | os.PathLike[str], dtype: Any = "float32") -> np.ndarray:
    """The store's embeddings, (N, dim), L2-normalised, in ``dtype`` (float16, float32 or
    float64): a read-only view of the array the store object caches and searches, so
    that changing it can't change later results; ``.copy()`` it to change it."""
    view = _open(store).vectors(dtype).view()
    view.flags.writeable = False
    return view


__all__ = [
    "embed_images", "evaluate", "find_duplicates", "find_issues", "import_embeddings",
    "load_head", "mine_pairs", "open_store", "pair_loader", "pairs_to_dataset",
    "project_store", "search", "store_info", "train_head", "vectors",
]
