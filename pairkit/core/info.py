"""``pairkit info``: what a store holds (counts, encoder, dims, views, labels, sizes, format)
and whether its files match their checksums, as a dict and as lines for a person."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pairkit.core.shown import shown_text
from pairkit.errors import StoreError


def _index_current(folder: Path, name: str, content_id: str, count: int) -> bool:
    """Whether the saved index ``name`` was built for these rows (its sealed description
    names this content id and row count): an index of rows since appended to is not
    loaded by mine, eval or dedup."""
    from pairkit.index.saved import read_index_meta

    meta = read_index_meta(folder / (Path(name).stem + ".json"))
    return meta is not None and meta.get("content_id") == content_id and \
        meta.get("count") == count


def skipped_files(errors: list[dict[str, Any]]) -> int:
    """The errors.jsonl records that count as files embed skipped: all but symlink loops
    (a loop is left out on purpose, reported once; embed's summary counts the same)."""
    return sum(1 for e in errors if not str(e.get("reason", "")).startswith("symlink loop"))


def _index_names(info: dict[str, Any]) -> list[str]:
    stale = set(info.get("stale_indexes") or ())
    return [f"{shown_text(n)} (stale: built for other rows, not used; pairkit index rebuilds "
            "it)" if n in stale else shown_text(n) for n in info["indexes"]]


def store_info(root: Any, verify: bool = True) -> dict[str, Any]:
    """The facts of the store at ``root`` (a folder or an ``s3://`` URL). ``checksums``:
    "ok" when every shard's and the item table's sha256 was checked (``verify``; always
    for a URL) and holds, "not checked" otherwise; a mismatch or a damaged file raises
    :class:`StoreError` naming it. Sizes are the ones the manifest records (checked
    against the files when they are opened)."""
    import numpy as np

    from pairkit.core.store import Store

    st = Store.open(root, verify=verify)
    root = st.root
    remote = not isinstance(root, Path)
    m = st.manifest
    items = st.items
    views = items["view"].to_numpy() if st.count else np.zeros(0, dtype=np.int16)
    per_source = items.groupby("source").size().to_numpy() if st.count else np.zeros(0)
    labels = items["label"].dropna()
    top = labels.value_counts().head(5)
    records = [(s.file, s.bytes) for s in st.shards] + [
        (rec["file"], rec.get("bytes")) for rec in (m.get("items"), m.get("errors")) if rec]
    sizes = {}
    for name, size in records:
        if size is None and not remote and (root / name).exists():  # format 1: no sizes
            size = (root / name).stat().st_size
        sizes[name] = int(size or 0)
    index_dir = None if remote else root / "index"
    indexes = (sorted(p.name for p in index_dir.glob("*.faiss"))
               if index_dir is not None and index_dir.is_dir() else [])
    stale = [name for name in indexes if index_dir is not None
             and not _index_current(index_dir, name, st.content_id, st.count)]
    encoder = st.encoder
    errors = m.get("errors")
    skipped = int(errors.get("rows", 0) or 0) if isinstance(errors, dict) else 0
    if skipped:
        try:
            skipped = skipped_files(st.read_errors())
        except StoreError:
            if verify or remote:
                raise  # a damaged errors.jsonl is named, as every damaged file is

    return {
        "store": str(root),
        "format": m.get("format"),
        "format_version": st.format_version,
        "pairkit_version": m.get("pairkit_version"),
        "created": m.get("created"),
        "updated": m.get("updated"),
        "rows": st.count,
        "sources": int(items["source"].nunique()) if st.count else 0,
        "views": sorted(int(v) for v in np.unique(views)),
        "views_per_source": {"min": int(per_source.min()), "max": int(per_source.max())}
        if len(per_source) else None,
        "dim": st.dim,
        "dtype": st.dtype,
        "normalized": bool(m.get("normalized", True)),
        "encoder": encoder.get("name"),
        "encoder_details": {k: v for k, v in encoder.items() if k != "name"},
        "embedding": m.get("embedding"),
        "projected": m.get("projected"),  # pairkit project: the head and the input store
        "image_root": m.get("image_root"),
        "labeled_rows": int(len(labels)),
        "labels": int(labels.nunique()),
        "label_source": m.get("labels"),
        "top_labels": {str(k): int(v) for k, v in top.items()},
        "shards": len(st.shards),
        "bytes": int(sum(sizes.values())),
        "vector_bytes": int(sum(sizes.get(s.file, 0) for s in st.shards)),
        "errors": skipped,
        "errors_file": errors.get("file") if isinstance(errors, dict) else None,
        "indexes": indexes,
        "stale_indexes": stale,  # built for other rows (rows appended since): not used
        "content_id": st.content_id,
        "checksums": "ok" if verify or remote else "not checked",
    }


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _projected_line(projected: Any) -> str | None:
    """The line of a store written by ``pairkit project``: the head its vectors went
    through and the store they came from; None for any other store."""
    if not isinstance(projected, dict):
        return None
    head = projected.get("head") if isinstance(projected.get("head"), dict) else {}
    loss = projected.get("loss") if isinstance(projected.get("loss"), dict) else {}
    facts = []
    if head.get("kind") is not None:
        facts.append(shown_text(str(head["kind"])) + (
            f" {head['in_dim']}->{head['out_dim']}"
            if head.get("in_dim") is not None and head.get("out_dim") is not None else ""))
    if loss.get("name") is not None:
        facts.append(f"loss {shown_text(str(loss['name']))}")
    if projected.get("complete") is False:
        facts.append("training did not finish")
    line = f"projected: by head {shown_text(str(projected.get('path')))}"
    line += f" ({', '.join(facts)})" if facts else ""
    line += f", from store {shown_text(str(projected.get('from_store')))}"
    if projected.get("from_content_id"):
        line += f" (content id {shown_text(str(projected['from_content_id']))})"
    return line


def info_lines(info: dict[str, Any]) -> list[str]:
    """``pairkit info``'s lines for a person."""
    vps = info["views_per_source"]
    views = ("no rows" if vps is None else
             f"{vps['min']} per source" if vps["min"] == vps["max"] else
             f"{vps['min']}-{vps['max']} per source")
    details = info["encoder_details"]
    shown = {k: v for k, v in details.items()
             if k in ("pretrained", "checkpoint", "library", "library_version")
             or (k == "seed" and details.get("pretrained") == "none")}  # random weights' seed
    pre = details.get("preprocess")
    if isinstance(pre, dict) and pre.get("size") is not None:
        shown["image_size"] = pre["size"]  # the side images were fed at
    extra = ", ".join(f"{k} {shown_text(str(v))}" for k, v in shown.items())
    labels = (f"{info['labeled_rows']:,} of {info['rows']:,} rows labelled, "
              f"{info['labels']:,} labels" if info["labeled_rows"] else "none")
    if info["top_labels"]:
        labels += " (most: " + ", ".join(f"{shown_text(k)} {v:,}"
                                         for k, v in info["top_labels"].items()) + ")"
    lines = [
        f"store {shown_text(info['store'])}: {shown_text(str(info['format']))} format "
        f"{info['format_version']} (written by pairkit {shown_text(str(info['pairkit_version']))}"
        f"), content id {info['content_id']}",
        f"rows {info['rows']:,}: {info['sources']:,} sources, views {views}",
        f"vectors: dim {info['dim']}, {info['dtype']}"
        + (", L2-normalised" if info["normalized"] else ""),
        f"encoder: {shown_text(str(info['encoder']))}" + (f" ({extra})" if extra else ""),
        *filter(None, [_projected_line(info.get("projected"))]),
        f"labels: {labels}",
        f"files: {info['shards']} shard{'s' if info['shards'] != 1 else ''}, "
        f"{_size(info['bytes'])} ({_size(info['vector_bytes'])} of vectors)"
        + (f"; saved indexes: {', '.join(_index_names(info))}" if info["indexes"] else ""),
    ]
    if info["image_root"]:
        lines.append(f"image root: {shown_text(info['image_root'])}")
    if info["errors"]:
        lines.append(f"files that could not be embedded: {info['errors']:,} "
                     f"({shown_text(str(info['errors_file']))})")
    lines.append(f"created {shown_text(str(info['created']))}, "
                 f"updated {shown_text(str(info['updated']))}")
    lines.append(f"checksums: {info['checksums']}")
    return lines


__all__ = ["StoreError", "info_lines", "skipped_files", "store_info"]
