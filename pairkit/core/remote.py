"""Object storage: telling a URL from a path, and the few object operations pairkit uses.

A location is a local path or a URL (``s3://bucket/key``, ``gs://...``, any fsspec
protocol). URLs are handled by fsspec (``pip install 'pairkit[s3]'`` gives s3fs; gcsfs,
adlfs ... for the others); the S3 endpoint, credentials and region come from the usual
AWS settings (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``~/.aws/config`` ...). An
s3:// request waits at most ``PAIRKIT_S3_TIMEOUT`` seconds (default 10) to connect and
for each read, and is tried :data:`S3_TRIES` times in all (:func:`s3_options`): an
endpoint that never answers fails in one line within about half a minute, not botocore's
minutes of retries.

Objects are written whole (an object appears complete or not at all, so no temp file and
rename is needed) and never renamed. The one operation a commit needs beyond that is the
conditional write (:func:`put_if`): S3's ``If-None-Match: *`` (create only) and
``If-Match: ETAG`` (replace only the version read), so that of two writers only one
commits. Writing where no conditional write is known (every scheme but s3:// today) is
refused in one line rather than done unsafely.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from pathlib import Path
from typing import Any

from pairkit.errors import PairkitError, UsageError

URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")
# what pathlib makes of a URL: Path("s3://b/k") == Path("s3:/b/k")
MANGLED_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):/(?!/)")
CONDITIONAL = ("s3", "s3a")  # schemes whose conditional write pairkit uses
WRITABLE_HINT = "s3://"
TIMEOUT_ENV = "PAIRKIT_S3_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0
S3_TRIES = 3  # s3fs's tries of a request (botocore's own retries off)


class CommitConflict(PairkitError):
    """Another writer committed first (the conditional write's precondition failed)."""


def is_url(location: Any) -> bool:
    """True for a URL of object storage (``file://`` and plain paths are local)."""
    if not isinstance(location, str):
        return False
    m = URL_RE.match(location)
    return bool(m) and m.group("scheme").lower() != "file"


def scheme(url: str) -> str:
    m = URL_RE.match(url)
    return m.group("scheme").lower() if m else ""


def check_local(path: Any, what: str = "path") -> None:
    """UsageError when ``path`` is a URL mangled into a local path (``Path('s3://b')`` is
    ``s3:/b``), so it never becomes a local folder named ``s3:``."""
    text = str(path)
    m = MANGLED_RE.match(text)
    if m and not Path(m.group("scheme") + ":").exists():
        rest = text[len(m.group(0)):]
        # Path() turns file:///x into file:/x: the fix keeps the third slash
        fixed = f"file:///{rest}" if m.group("scheme").lower() == "file" else \
            f"{m.group('scheme')}://{rest}"
        raise UsageError(f"{what} {text} looks like the URL {fixed} turned into a local path: "
                         "this option takes local paths only")


def check_local_only(path: Any, what: str = "path") -> None:
    """UsageError for a URL, as given or mangled into a local path (:func:`check_local`),
    where only a local path is read (an embeddings file, a head folder)."""
    if is_url(str(path)):
        raise UsageError(f"{what} {path} is a URL: this option takes local paths only")
    check_local(path, what)


def location(value: str | Path) -> str | Path:
    """A URL as is (``file://`` as its local path), anything else as a checked Path."""
    if isinstance(value, str):
        m = URL_RE.match(value)
        if m and m.group("scheme").lower() == "file":
            return Path(m.group("rest"))
        if m:
            return value
    check_local(value)
    return Path(value)


def normal_url(url: str) -> str:
    """``url`` as compared with another: the scheme lower-cased (``s3a`` as ``s3``), runs
    of ``/`` in the key as one, no trailing ``/`` (``s3://b//k/`` is ``s3://b/k``)."""
    m = URL_RE.match(url)
    if not m:
        return url
    name = m.group("scheme").lower()
    name = "s3" if name == "s3a" else name
    return f"{name}://" + re.sub(r"/+", "/", m.group("rest")).strip("/")


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def s3_timeout() -> float:
    """Seconds an s3:// request waits to connect and for each read: ``PAIRKIT_S3_TIMEOUT``
    (default :data:`DEFAULT_TIMEOUT_S`); UsageError for a value that is not > 0."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return value


def s3_options() -> dict[str, Any]:
    """s3fs's options: the connect and read timeouts of :func:`s3_timeout`, botocore's
    retries off (s3fs retries a timed-out request itself, :data:`S3_TRIES` times)."""
    seconds = s3_timeout()
    return {"config_kwargs": {"connect_timeout": seconds, "read_timeout": seconds,
                              "retries": {"max_attempts": 1, "mode": "standard"}}}


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path in it; one line when it can't."""
    try:
        import fsspec
    except ImportError:
        raise PairkitError(f"{url}: object storage needs fsspec: pip install "
                           "'pairkit[s3]'") from None
    s3 = scheme(url) in CONDITIONAL
    options = s3_options() if s3 else {}
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
        if s3:
            fs.retries = S3_TRIES
        return fs, path
    except ImportError as exc:
        first = (str(exc).strip().splitlines() or ["missing package"])[0]
        raise PairkitError(f"{url}: {first}") from None
    except ValueError as exc:
        raise PairkitError(f"{url}: {exc}") from None


def _failure(url: str, exc: BaseException, doing: str) -> PairkitError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    if "Timeout" in type(exc).__name__ or isinstance(exc, TimeoutError):
        first += (f" (no answer within {s3_timeout():g} s, {S3_TRIES} tries; "
                  f"{TIMEOUT_ENV} sets the seconds)")
    return PairkitError(f"{doing} {url} failed: {type(exc).__name__}: {first}")


def read_bytes(url: str, max_bytes: int | None = None) -> bytes:
    """The whole object (FileNotFoundError when there is none; PairkitError when larger
    than ``max_bytes`` or unreadable)."""
    fs, path = filesystem(url)
    try:
        # a listing cached here (list_names) may predate the object: s3fs sizes it from
        # that listing and would say there is none
        fs.invalidate_cache(path)
        if max_bytes is not None:
            size = fs.size(path)
            if size is not None and size > max_bytes:
                raise PairkitError(f"{url} is {size:,} bytes, more than {max_bytes:,}")
        return fs.cat_file(path)
    except (FileNotFoundError, PairkitError):
        raise
    except Exception as exc:
        raise _failure(url, exc, "reading") from None


def read_range(url: str, start: int, end: int) -> bytes:
    """Bytes ``start .. end - 1`` of the object (a ranged GET)."""
    fs, path = filesystem(url)
    try:
        return fs.cat_file(path, start=start, end=end)
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise _failure(url, exc, "reading") from None


def read_tagged(url: str, max_bytes: int) -> tuple[bytes, str | None]:
    """The object and its version tag (S3 ETag) read together; FileNotFoundError when
    there is none."""
    fs, path = filesystem(url)
    if scheme(url) not in CONDITIONAL:
        return read_bytes(url, max_bytes), None
    bucket, key = _bucket_key(path)
    try:
        head = fs.call_s3("head_object", Bucket=bucket, Key=key)
        if int(head.get("ContentLength", 0)) > max_bytes:
            raise PairkitError(f"{url} is {head['ContentLength']:,} bytes, more than "
                               f"{max_bytes:,}")
        got = fs.call_s3("get_object", Bucket=bucket, Key=key)
        body = got["Body"]
        data = _read_body(fs, body)
        return data, got.get("ETag")
    except (FileNotFoundError, PairkitError):
        raise
    except Exception as exc:
        raise _failure(url, exc, "reading") from None


def _read_body(fs: Any, body: Any) -> bytes:
    """The bytes of an aiobotocore streaming body, on s3fs's event loop."""
    from fsspec.asyn import sync

    async def read() -> bytes:
        async with body as stream:
            return await stream.read()

    return sync(fs.loop, read)


def _bucket_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def check_has_bucket(url: str) -> None:
    """UsageError for a URL with no bucket (``s3://``, ``s3:///x.parquet``): its objects
    can't be written anywhere (botocore's refusal came after the work, cut to one line)."""
    m = URL_RE.match(url)
    if m and not m.group("rest").split("/", 1)[0]:
        raise UsageError(f"{url}: no bucket in the URL ({m.group('scheme')}://BUCKET/KEY)")


def check_writable(url: str, what: str) -> None:
    """PairkitError unless pairkit can commit ``what`` at ``url`` (a conditional write);
    UsageError for a URL with no bucket."""
    check_has_bucket(url)
    if scheme(url) not in CONDITIONAL:
        raise PairkitError(f"writing {what} to {scheme(url)}:// is not supported: pairkit's "
                           f"commit needs a conditional write, which it has for "
                           f"{WRITABLE_HINT} only (write it locally and copy it)")
    filesystem(url)


def put(url: str, data: bytes) -> None:
    """Write the whole object (replacing any)."""
    fs, path = filesystem(url)
    try:
        fs.pipe_file(path, data)
    except Exception as exc:
        raise _failure(url, exc, "writing") from None


def write_whole(location: str | Path, data: bytes | memoryview) -> None:
    """Write ``data`` as the whole object or file at ``location``, atomically either way:
    an object put whole (:func:`put`), a local file renamed into place."""
    if is_url(location):
        put(str(location), bytes(data))
        return
    from pairkit.core.atomic import atomic_path

    with atomic_path(Path(location)) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def put_if(url: str, data: bytes, tag: str | None) -> str | None:
    """Write the object only if it is still the version ``tag`` (None: only if there is
    none); returns the new tag. CommitConflict when another writer got there first."""
    check_writable(url, "a commit")
    fs, path = filesystem(url)
    bucket, key = _bucket_key(path)
    cond = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
    try:
        out = fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **cond)
    except Exception as exc:
        text = str(exc)
        if "PreconditionFailed" in text or "pre-conditions" in text or isinstance(
                exc, FileExistsError) or "ConditionalRequestConflict" in text:
            raise CommitConflict(url) from None
        raise _failure(url, exc, "writing") from None
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)
    return out.get("ETag")


def _slash_key(url: str, path: str) -> bool:
    """True for an s3:// key that starts with ``/`` (``s3://b//k``: the key ``/k``), which
    s3fs lists as ``k/``, another prefix: such a key is listed by :func:`_listed` instead."""
    return scheme(url) in CONDITIONAL and _bucket_key(path)[1].startswith("/")


def _listed(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    """The objects directly under the key ``path`` + ``/``, listed by exactly that prefix
    (ListObjectsV2, page by page)."""
    bucket, key = _bucket_key(path)
    prefix = key.rstrip("/") + "/"
    out: dict[str, dict[str, Any]] = {}
    ask: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
    while True:
        page = fs.call_s3("list_objects_v2", **ask)
        for obj in page.get("Contents", []):
            name = obj["Key"][len(prefix):]
            if name:
                out[name] = {"name": f"{bucket}/{obj['Key']}", "size": obj.get("Size"),
                             "LastModified": obj.get("LastModified"), "type": "file"}
        if not page.get("IsTruncated") or not page.get("NextContinuationToken"):
            return out
        ask["ContinuationToken"] = page["NextContinuationToken"]


def _any_under(fs: Any, path: str) -> bool:
    """True when an object's key starts with exactly ``path`` + ``/``."""
    bucket, key = _bucket_key(path)
    try:
        page = fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key.rstrip("/") + "/",
                          MaxKeys=1)
    except FileNotFoundError:  # no bucket
        return False
    return bool(page.get("Contents"))


def _looked_up(url: str, question: str) -> bool:
    """The filesystem's answer to ``question`` (``exists``, ``isdir``, ``isfile``) about
    ``url``, its listing cache dropped first (another writer may have changed it)."""
    fs, path = filesystem(url)
    try:
        if question == "isdir" and _slash_key(url, path):
            return _any_under(fs, path)
        fs.invalidate_cache(path)
        return bool(getattr(fs, question)(path))
    except Exception as exc:
        raise _failure(url, exc, "looking up") from None


def exists(url: str) -> bool:
    return _looked_up(url, "exists")


def check_bucket(url: str) -> None:
    """PairkitError naming the bucket when the bucket (the first part of the path) of
    ``url`` does not exist: a missing bucket otherwise reads as an empty one (no store
    there, a free table name that fails only when written); UsageError for a URL with no
    bucket (:func:`check_has_bucket`)."""
    check_has_bucket(url)
    fs, path = filesystem(url)
    bucket = path.split("/", 1)[0]
    if not bucket:
        return
    try:
        fs.invalidate_cache(bucket)
        found = bool(fs.exists(bucket))
    except Exception as exc:
        raise _failure(url, exc, "looking up") from None
    if not found:
        raise PairkitError(f"{url}: bucket {bucket} does not exist")


def is_dir(url: str) -> bool:
    """True when objects lie under ``url/``."""
    return _looked_up(url, "isdir")


def is_file(url: str) -> bool:
    """True when an object is named ``url`` itself (not merely objects under ``url/``)."""
    return _looked_up(url, "isfile")


def list_names(url: str) -> dict[str, dict[str, Any]]:
    """The objects directly under ``url/``: name -> info (``size``, ``LastModified``)."""
    fs, path = filesystem(url)
    try:
        if _slash_key(url, path):
            return _listed(fs, path)
        fs.invalidate_cache(path)
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return {}
    except Exception as exc:
        raise _failure(url, exc, "listing") from None
    out = {}
    for e in entries:
        if e.get("type") == "file":
            out[e["name"].rstrip("/").rsplit("/", 1)[-1]] = e
    return out


def remove(url: str) -> None:
    """Delete the object (none there: nothing to do)."""
    fs, path = filesystem(url)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass
    except Exception as exc:
        raise _failure(url, exc, "removing") from None


def read_ranges(url: str, starts: list[int], ends: list[int]) -> list[bytes]:
    """Bytes ``starts[i] .. ends[i] - 1`` of the object, for each ``i``
    (:func:`read_spans` of one object); FileNotFoundError when there is no object."""
    if not starts:
        filesystem(url)  # a URL no filesystem takes is refused even with nothing to read
        return []
    return read_spans([url] * len(starts), starts, ends)


def read_spans(urls: list[str], starts: list[int], ends: list[int]) -> list[bytes]:
    """Bytes ``starts[i] .. ends[i] - 1`` of the object ``urls[i]``, for each ``i`` (one
    filesystem: ranged GETs, made concurrently); FileNotFoundError when an object is
    missing."""
    if not urls:
        return []
    fs, _ = filesystem(urls[0])
    path_of = {u: filesystem(u)[1] for u in dict.fromkeys(urls)}  # once per object
    paths = [path_of[u] for u in urls]
    try:
        out = fs.cat_ranges(paths, [int(s) for s in starts], [int(e) for e in ends],
                            on_error="raise")
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise _failure(urls[0], exc, "reading") from None
    return list(out)
