"""A run's temporary files beside the parts of the table it writes.

The blocks of a parts run (``pairkit mine`` to a parquet file or dataset) leave files
beside their parts for the run to read back: the score keys of each block
(:mod:`pairkit.mine.stream_quantiles`), the split lists' candidates
(:mod:`pairkit.mine.ivf_parts`), each block's mined positives
(:mod:`pairkit.mine.mined_parts`). Named one way everywhere: in a local parts folder
with a leading dot (a dataset folder committed from it leaves them out:
:func:`pairkit.core.table_parts.commit_parts`), on object storage an object beside the
dataset's parts with the writer's token in its name (the writer's abort removes it).
Each is written whole (an object put, or a file renamed into place).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def side_path(folder: str | os.PathLike[str], name: str, suffix: str, token: str = ""
              ) -> Path | str:
    """The file ``name`` + ``suffix`` beside the parts in ``folder`` (module docstring:
    ``.NAME.SUFFIX`` locally, ``.NAME-TOKEN.SUFFIX`` on object storage)."""
    from pairkit.core.remote import is_url, join

    if is_url(folder):
        return join(str(folder), f".{name}-{token}{suffix}")
    return Path(folder) / f".{name}{suffix}"


def write_arrays(path: Path | str, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as one ``.npz``, written whole to ``path`` (a file or an object)."""
    from pairkit.core.remote import write_whole

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_whole(path, buf.getbuffer())


def read_arrays(path: Path | str, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays ``names`` of a file written by :func:`write_arrays` (no pickles)."""
    from pairkit.core.remote import is_url, read_bytes

    src: Any = io.BytesIO(read_bytes(str(path))) if is_url(path) else path
    with np.load(src, allow_pickle=False) as f:
        return {name: f[name] for name in names}


def remove_objects(urls: Iterable[Path | str]) -> None:
    """Remove each object (best effort: any left over go with the writer's token)."""
    from pairkit.core.remote import remove
    from pairkit.errors import PairkitError

    for url in urls:
        with contextlib.suppress(PairkitError):
            remove(str(url))
