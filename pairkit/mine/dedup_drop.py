"""``dedup --drop``'s last look at the files before it lists copies for removal.

The groups are decided on what the store recorded when it was embedded (file hashes,
vectors); the files may have changed since. ``--drop`` is the list a user deletes
(``--paths-only --drop | xargs rm``), so a copy is listed only while removing it loses no
image: its file is still the one the store hashed, and its group's kept file is still
there and still the one the store hashed. Files are hashed again here, the dropped ones
and the kept ones (one read of each; copies whose store row has no hash, or that live
inside a container such as a tar shard, are checked for being there where they can be).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

SAME, CHANGED, MISSING, UNCHECKED, OUTSIDE = "same", "changed", "missing", "unchecked", "outside"


def safe_drops(table: pd.DataFrame, store: Any, warn: Callable[[str], None]) -> pd.DataFrame:
    """The rows of the dedup ``table`` to remove (every member but its group's kept one),
    less those whose file changed or is gone since the store ``store`` was embedded, and
    every row of a group whose kept file changed or is gone (removing its copies could
    remove the image's last copy). One ``warn`` line says how many were left out and why.
    A store without an image root here (imported, on object storage) is not checked."""
    from pairkit.core.paths import image_root_problem
    from pairkit.core.remote import is_url
    from pairkit.core.store import Store

    drops = table[~table["keep"].astype(bool)]
    if drops.empty or is_url(store):
        return drops.reset_index(drop=True)
    st = Store.open(store, verify=False)
    image_root = st.manifest.get("image_root")
    if image_root_problem(image_root) is not None:
        return drops.reset_index(drop=True)
    path, sha = st.item_columns("path", "file_sha256")
    kept = dict(zip(table.loc[table["keep"].astype(bool), "group"].tolist(),
                    table.loc[table["keep"].astype(bool), "id"].tolist(), strict=True))
    cache: dict[int, str] = {}

    def status(i: int) -> str:
        if i not in cache:
            cache[i] = file_status(Path(image_root), str(path[i].as_py()), sha[i].as_py())
        return cache[i]

    why = {"changed": 0, "missing": 0, "kept file changed or missing": 0, "outside": 0}
    keep_row = []
    for group, i in zip(drops["group"].tolist(), drops["id"].tolist(), strict=True):
        own, theirs = status(int(i)), status(int(kept[group]))
        reason = ({CHANGED: "changed", MISSING: "missing", OUTSIDE: "outside"}.get(own)
                  or ("kept file changed or missing" if theirs in (CHANGED, MISSING, OUTSIDE)
                      else None))
        if reason is not None:
            why[reason] += 1
        keep_row.append(reason is None)
    left_out = len(keep_row) - sum(keep_row)
    if left_out:
        parts = [f"{n} {w}" for w, n in why.items() if n]
        warn(f"--drop: {left_out} of {len(keep_row)} copies left out, their files no longer "
             f"as embedded ({', '.join(parts)}): rerun embed to refresh the store, then "
             "dedup again")
    return drops[keep_row].reset_index(drop=True)


def file_status(root: Path, path: str, stored: str | None) -> str:
    """Whether the item ``path`` under ``root`` is still the file the store hashed
    (``stored``: its hex sha256, None when the store has none): ``same``, ``changed``,
    ``missing``, ``unchecked`` (there, but no hash to compare; or inside a container
    file) or ``outside`` (a path that would leave the image root: never opened)."""
    from pairkit.core.integrity import sha256_file
    from pairkit.core.paths import resolve_item_path

    f = resolve_item_path(root, path)
    if f is None:
        return OUTSIDE
    if f.is_file():
        if not stored:
            return UNCHECKED
        try:
            return SAME if sha256_file(f) == stored else CHANGED
        except OSError:
            return MISSING
    parent = f.parent
    while parent != root and root in parent.parents:  # a tar member, a dataset row
        if parent.is_file():
            return UNCHECKED
        parent = parent.parent
    return MISSING
