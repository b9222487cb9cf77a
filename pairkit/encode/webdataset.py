"""Webdataset input: images inside tar shards (what img2dataset writes).

A shard ``NNNNN.tar`` holds samples as members that share a key: ``key.jpg`` (or .png,
.webp ...) with ``key.cls`` (a class label, text) and/or ``key.json`` (metadata; its
``label`` field is the label). Shards are named one by one or with brace patterns,
``shards/{00000..00099}.tar`` (ranges keep the zero padding) or ``{a,b}.tar``.

Every image member is one source; its store path (and source) is the shard's path
relative to the shards' common folder, then the member name: ``00000.tar/key.jpg``,
stable across runs and machines. Members are read by offset (``os.pread`` of the data
that the tar header points at), so a shard is opened once to list it and any member can
be read alone, in any process: plain (uncompressed) tars only. Bad input is recorded,
never fatal: a missing shard, a damaged tar (members before the damage are kept), a
member that is not a regular file or whose name leaves the shard (``..``, absolute), a
name that is not UTF-8, a duplicate name.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from pairkit.core.remote import is_url
from pairkit.encode.images import IMAGE_EXTENSIONS, DecodeError, ImageFile
from pairkit.errors import PairkitError, UsageError

MAX_SHARDS = 1_000_000
MAX_LABEL_BYTES = 1 << 20
_BRACE = re.compile(r"\{([^{}]*)\}")


def is_webdataset(spec: str | os.PathLike[str]) -> bool:
    """True when ``spec`` names tar shards (a ``.tar`` path or a brace pattern of them); a
    local folder named ``photos.tar`` is an image folder."""
    text = str(spec)
    return text.lower().endswith(".tar") and ("://" in text or not os.path.isdir(text))


def expand_braces(text: str) -> list[str]:
    """``a/{00..02}.tar`` -> ``a/00.tar, a/01.tar, a/02.tar``; ``{x,y}`` lists; several
    braces multiply, in order. A range keeps the zero padding of its bounds."""
    m = _BRACE.search(text)
    if m is None:
        if "{" in text or "}" in text:
            raise UsageError(f"unbalanced brace in {text!r}")
        return [text]
    body = m.group(1)
    r = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if r:
        a, b = r.groups()
        lo, hi = int(a), int(b)
        if hi < lo:
            raise UsageError(f"brace range {{{body}}} runs backwards")
        if hi - lo >= MAX_SHARDS:
            raise UsageError(f"brace range {{{body}}} names more than {MAX_SHARDS:,} shards")
        width = len(a) if a.startswith("0") or len(a) == len(b) else 0
        items = [str(i).zfill(width) for i in range(lo, hi + 1)]
    elif "," in body:
        items = body.split(",")
    else:
        raise UsageError(f"brace {{{body}}} is neither a range a..b nor a list a,b")
    out: list[str] = []
    for item in items:
        out.extend(expand_braces(text[:m.start()] + item + text[m.end():]))
        if len(out) > MAX_SHARDS:
            raise UsageError(f"{text!r} names more than {MAX_SHARDS:,} shards")
    return out


def list_shards(spec: str | os.PathLike[str]) -> tuple[Path, list[tuple[str, Path]],
                                                      list[tuple[str, str]]]:
    """The shards a spec names: ``(root, [(relative name, path)], problems)``. ``root`` is
    the shards' common folder; a named shard that does not exist is a problem (img2dataset
    leaves gaps), none existing is an error."""
    names = expand_braces(str(spec))
    if is_url(str(spec)):
        return _list_remote_shards(str(spec), names)
    found = [Path(n) for n in names if Path(n).is_file()]
    if not found:
        raise PairkitError(f"no tar shard found for {spec}")
    root = Path(os.path.commonpath([str(p.parent.resolve()) for p in found]))
    shards, problems = [], []
    for name in dict.fromkeys(names):  # in order, once each
        p = Path(name)
        if p.is_file():
            shards.append((p.resolve().relative_to(root).as_posix(), p))
        elif p.exists():
            problems.append((name, "not a tar file (a folder)"))
        else:
            problems.append((name, "tar shard not found"))
    return root, shards, problems


def _list_remote_shards(spec: str, names: list[str]
                        ) -> tuple[Any, list[tuple[str, Any]], list[tuple[str, str]]]:
    """:func:`list_shards` of URLs (``s3://b/shards/{00000..00009}.tar``): ``root`` is the
    URL of the shards' common prefix."""
    from pairkit.core.remote import exists

    found = [n for n in dict.fromkeys(names) if exists(n)]
    if not found:
        raise PairkitError(f"no tar shard found for {spec}")
    parents = [n.rsplit("/", 1)[0].split("/") for n in found]
    common = parents[0]
    for other in parents[1:]:
        k = 0
        while k < min(len(common), len(other)) and common[k] == other[k]:
            k += 1
        common = common[:k]
    root = "/".join(common)
    shards = [(n[len(root) + 1:], n) for n in found]
    problems = [(n, "tar shard not found") for n in dict.fromkeys(names) if n not in found]
    return root, shards, problems


def read_member(tar: Path, offset: int, size: int, max_bytes: int) -> bytes:
    """The ``size`` bytes at ``offset`` of ``tar`` (one member's data); DecodeError with the
    reason (too large, empty, the shard gone or shorter than its header says). A shard at a
    URL is read with one ranged GET."""
    if size > max_bytes:
        raise DecodeError(f"file too large ({size:,} bytes > --max-file-bytes {max_bytes:,})")
    if size == 0:
        raise DecodeError("empty file (0 bytes)")
    if isinstance(tar, str):
        from pairkit.core.remote import read_range

        try:
            data = read_range(tar, offset, offset + size)
        except FileNotFoundError:
            raise DecodeError("tar shard vanished during the run") from None
        except PairkitError as exc:
            raise DecodeError(f"unreadable tar shard: {exc}") from None
        if len(data) != size:
            raise DecodeError("truncated tar member (the shard ends inside it)")
        return data
    try:
        fd = os.open(tar, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise DecodeError("tar shard vanished during the run") from None
    except OSError as exc:
        raise DecodeError(f"unreadable tar shard: {exc.strerror or exc}") from None
    try:
        chunks, got = [], 0
        while got < size:
            chunk = os.pread(fd, size - got, offset + got)
            if not chunk:
                raise DecodeError("truncated tar member (the shard ends inside it)")
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _member_problem(name: str) -> str | None:
    """Why a member name can't be a store path, or None."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "file name is not valid UTF-8: rename it (store paths are UTF-8 text)"
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts or "\\" in name:
        return "member name leaves the shard (absolute, .. or backslash): skipped"
    return None


def _split(name: str) -> tuple[str, str]:
    """Webdataset's (key, extension): the extension starts at the first dot of the base
    name (``a/b.seg.png`` -> ``a/b``, ``seg.png``)."""
    base = name.rsplit("/", 1)[-1]
    dot = base.find(".")
    if dot <= 0:
        return name, ""
    return name[: len(name) - len(base) + dot], base[dot + 1:].lower()


def _label(tar: Path, member: tarfile.TarInfo | None, ext: str) -> str | None:
    if member is None or member.size > MAX_LABEL_BYTES:
        return None
    try:
        text = read_member(tar, member.offset_data, member.size, MAX_LABEL_BYTES).decode("utf-8")
    except (DecodeError, UnicodeDecodeError):
        return None
    if ext == "cls":
        return text.strip() or None
    try:
        value = json.loads(text).get("label")
    except (ValueError, AttributeError):
        return None
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def list_members(tar: Path, rel: str) -> tuple[list[ImageFile], list[tuple[str, str]],
                                                dict[str, str | None]]:
    """The image members of one shard: ``(files sorted by path, problems, labels)``.

    ``rel`` is the shard's name in store paths; a member's path is ``rel/member``. Labels
    come from the sample's ``.cls`` member, else the ``label`` field of its ``.json``.
    """
    problems: list[tuple[str, str]] = []
    members: list[tarfile.TarInfo] = []
    try:
        with _open_shard(tar) as fh:
            if fh.read(2) == b"\x1f\x8b":
                return [], [(rel, "a gzip-compressed tar: members can't be read by offset "
                                  "(decompress it: gunzip)")], {}
            fh.seek(0)
        with _open_shard(tar) as fh, tarfile.open(fileobj=fh, mode="r:") as tf:
            try:
                for m in tf:
                    members.append(m)
            except (tarfile.TarError, EOFError, OSError) as exc:
                problems.append((rel, f"truncated or corrupt tar ({exc}); the "
                                      f"{len(members)} members before the damage are used"))
    except (tarfile.TarError, EOFError) as exc:
        return [], [(rel, f"not a tar file ({exc})")], {}
    except OSError as exc:
        return [], [(rel, f"unreadable tar shard: {exc.strerror or exc}")], {}
    files: list[ImageFile] = []
    extras: dict[tuple[str, str], tarfile.TarInfo] = {}
    seen: set[str] = set()
    for m in members:
        key, ext = _split(m.name)
        if ext in ("cls", "json") and m.isfile():
            extras.setdefault((key, ext), m)
            continue
        if "." + ext.rsplit(".", 1)[-1] not in IMAGE_EXTENSIONS:
            continue
        path = f"{rel}/{m.name}"
        problem = _member_problem(m.name)
        if problem is None and not m.isfile():
            problem = "not a regular file (a link or device member)"
        if problem is None and m.name in seen:
            problem = "duplicate member name in the shard: the first one is used"
        if problem is not None:
            problems.append((path, problem))
            continue
        seen.add(m.name)
        files.append(ImageFile(path, tar, (m.offset_data, m.size)))
    labels = {}
    for f in files:
        key, _ = _split(f.path[len(rel) + 1:])
        label = _label(tar, extras.get((key, "cls")), "cls")
        if label is None:
            label = _label(tar, extras.get((key, "json")), "json")
        labels[f.path] = label
    files.sort(key=lambda f: f.path)
    return files, problems, labels


def _open_shard(tar: Any) -> Any:
    """A seekable binary file of a shard: a local file, or an object read in ranged GETs
    (fsspec's block cache), so listing its headers does not fetch the member data."""
    if isinstance(tar, str):
        from pairkit.core.remote import filesystem

        fs, path = filesystem(tar)
        try:
            return fs.open(path, "rb", block_size=1 << 20, cache_type="readahead")
        except FileNotFoundError:
            raise OSError(2, "not found") from None
    return open(tar, "rb")


def discover_webdataset(spec: str | os.PathLike[str]
                        ) -> tuple[Path, list[ImageFile], list[tuple[str, str]],
                                   dict[str, str | None]]:
    """Every image member of the shards of ``spec``: ``(root, files sorted by path,
    problems, labels by path)``."""
    root, shards, problems = list_shards(spec)
    files: list[ImageFile] = []
    labels: dict[str, str | None] = {}
    for rel, path in shards:
        f, p, lab = list_members(path, rel)
        files += f
        problems += p
        labels.update(lab)
    files.sort(key=lambda f: f.path)
    return root, files, problems, labels
