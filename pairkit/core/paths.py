"""Item paths: relative to the image root and never outside it.

A store's ``path`` column is joined to ``image_root`` by commands that open the
images (dedup ``--keep largest`` and ``--absolute``, HTML views). A path that is
absolute, holds a ``..`` component, is empty or holds a NUL byte could name any file
on the machine, so import refuses it and resolving commands check it again (stores
made before the check existed).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def path_problem(path: object) -> str | None:
    """Why ``path`` can't be an item path (relative, '/'-separated, inside the root), or None."""
    if not isinstance(path, str):
        return f"is {type(path).__name__}, not text"
    if not path:
        return "is empty"
    if "\0" in path:
        return "holds a NUL byte"
    if path.startswith(("/", "\\")):
        return "is absolute (item paths are relative to the image root)"
    if ".." in path.replace("\\", "/").split("/"):
        return "holds '..' (item paths must stay under the image root)"
    return None


def first_bad_path(paths: Iterable[object]) -> tuple[int, object, str] | None:
    """``(row, path, reason)`` of the first path that :func:`path_problem` refuses, or None."""
    for row, p in enumerate(paths):
        reason = path_problem(p)
        if reason is not None:
            return row, p, reason
    return None


def resolve_item_path(image_root: str | os.PathLike[str], path: str) -> Path | None:
    """``image_root / path`` when ``path`` is a safe item path, else None."""
    if path_problem(path) is not None:
        return None
    return Path(image_root) / path


def image_root_problem(image_root: str | None) -> str | None:
    """Why the images under ``image_root`` can't be opened as files (the tail of "its
    image_root ..."), or None for an existing folder: unset (an imported store), a URL
    (images on object storage: the commands that read image files don't read those), or
    missing."""
    if not image_root:
        return "is unset"
    if "://" in str(image_root):
        return f"{image_root} is on object storage, whose images dedup does not read"
    if not Path(image_root).is_dir():
        return f"is missing: {image_root}"
    return None


def is_within(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """True when ``path`` is ``folder`` or lies under it (both resolved, links followed)."""
    p, f = Path(path).resolve(), Path(folder).resolve()
    return p == f or f in p.parents


def check_folder_output(output: str | os.PathLike[str] | None, option: str, what: str) -> None:
    """Refuse (UsageError, exit 2) ``-`` for an output that is a folder (``what``: "a store
    is a folder", ...): ``-`` is stdout, for tables; taken as a name it made a folder
    called ``-``; and one that is a link to nothing (:func:`check_not_dangling`)."""
    from pairkit.errors import UsageError

    if output is not None and str(output) == "-":
        raise UsageError(f"{option} -: {what}; - (stdout) is for tables: name a folder")
    if output is not None and "://" not in str(output):
        check_not_dangling(output, option)


def check_parent_folder(output: str | os.PathLike[str], option: str = "-o") -> None:
    """Refuse (UsageError, exit 2) an output under an existing file (``f/x.jsonl`` where
    ``f`` is a file): its folder can't be made, which failed only when the output was
    written, after the work; and (PairkitError, exit 1) one whose nearest existing folder
    this user can't write in."""
    from pairkit.errors import PairkitError, UsageError

    for parent in Path(output).parents:  # the nearest first
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} {output}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise PairkitError(f"{option} {output}: can't write in {parent} "
                                   "(permission denied)")
            return


def check_not_dangling(output: str | os.PathLike[str], option: str = "-o") -> None:
    """Refuse (UsageError, exit 2) an output that is a symbolic link to nothing: a file
    output met the link's name only when committing, after the work ("written by another
    run meanwhile"), and a folder output could not be made."""
    from pairkit.errors import UsageError

    p = Path(output)
    if p.is_symlink() and not p.exists():
        raise UsageError(f"{option} {output} is a link to {os.readlink(p)}, which does not "
                         "exist: remove the link or name another output")


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when two local paths name one file, however spelled (resolved, links
    followed), or two URLs that name one object (:func:`pairkit.core.remote.normal_url`);
    ``-`` (stdout) is never the same file as anything, nor a URL as a local path."""
    if "-" in (str(a), str(b)):
        return False
    if "://" in str(a) or "://" in str(b):
        from pairkit.core.remote import normal_url

        return normal_url(str(a)) == normal_url(str(b))
    return Path(a).resolve() == Path(b).resolve()


def check_output_apart(output: str | os.PathLike[str] | None,
                       inputs: Iterable[str | os.PathLike[str] | None],
                       option: str = "-o") -> None:
    """Refuse (UsageError, exit 2) an output that is an input, lies inside an input folder
    (a store's manifest, say) or holds an input, or whose folder can't be made (a file on
    the way: :func:`check_parent_folder`); ``-`` and None are never outputs/inputs. A URL
    output is compared with the URL inputs (:func:`check_url_apart`)."""
    from pairkit.errors import UsageError

    if output is None or str(output) == "-":
        return
    if "://" in str(output):
        check_url_apart(str(output), inputs, option)
        return
    check_not_dangling(output, option)
    check_parent_folder(output, option)
    for source in inputs:
        if source is None or str(source) == "-" or "://" in str(source):
            continue  # (object storage: a URL is never a local path)
        if is_within(output, source):
            where = "is" if Path(output).resolve() == Path(source).resolve() else "is inside"
            raise UsageError(f"{option} {output} {where} the input {source}: "
                             f"choose another {option}")
        if Path(output).is_dir() and is_within(source, output):
            raise UsageError(f"the input {source} is inside {option} {output}: "
                             f"choose another {option}")


def check_url_apart(output: str, inputs: Iterable[str | os.PathLike[str] | None],
                    option: str = "-o") -> None:
    """Refuse (UsageError, exit 2) a URL output that is a URL input, lies under an input's
    prefix (a store's ``manifest.json``) or holds an input under its own, the URLs compared
    normalised (:func:`pairkit.core.remote.normal_url`: trailing ``/``, ``//``); a local
    input is never a URL output."""
    from pairkit.core.remote import normal_url
    from pairkit.errors import UsageError

    out = normal_url(output)
    for source in inputs:
        if source is None or "://" not in str(source):
            continue
        src = normal_url(str(source))
        if out == src or out.startswith(src + "/"):
            where = "is" if out == src else "is inside"
            raise UsageError(f"{option} {output} {where} the input {source}: "
                             f"choose another {option}")
        if src.startswith(out + "/"):
            raise UsageError(f"the input {source} is inside {option} {output}: "
                             f"choose another {option}")
