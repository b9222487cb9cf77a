"""The mined positives of a parts run, one file per block of anchors beside the parts.

A run that writes its table by blocks (:mod:`pairkit.mine.parts_run`) mines every
anchor's positives in its plan, but each block writes only its own anchors' rows. Kept
in the plan, every block's worker would map all of them (about 100 bytes a row: 0.8 GB at
8M rows, in every worker of a Ray cluster); here the plan writes each block's slice to a
file in the run's parts folder (or, for a dataset on object storage, an object beside
its parts named with the writer's token) and keeps only where they are
(:class:`MinedFiles`): a block reads its own. The files go with the parts folder, or
with :func:`remove_mined` or the writer's abort on object storage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from pairkit.mine.positives import MinedPositives


def mined_path(folder: str, block: int, token: str = "") -> Path | str:
    """The file of block ``block``'s mined positives beside the run's parts
    (:func:`pairkit.core.side_files.side_path`: ``.mined-BBBBB.npz``, on object storage
    with the writer's ``token``, so that the run's abort removes it)."""
    from pairkit.core.side_files import side_path

    return side_path(folder, f"mined-{block:05d}", ".npz", token)


@dataclass(frozen=True)
class MinedFiles:
    """Where the plan wrote each block's mined positives: ``folder`` (a local folder or a
    URL), the writer's ``token``, the run's ``batch`` (anchors a block; block ``b`` holds
    anchors ``b * batch`` up to the next block's), ``blocks`` (how many) and ``count``
    (mined positives in all)."""

    folder: str
    token: str
    batch: int
    blocks: int
    count: int

    def __len__(self) -> int:
        return self.count

    def read(self, span: tuple[int, int]) -> MinedPositives:
        """The mined positives of the anchors ``span`` (a block's), ``rows`` as the plan's
        (anchor rows of the run, not of the block)."""
        from pairkit.core.side_files import read_arrays

        got = read_arrays(mined_path(self.folder, span[0] // self.batch, self.token),
                          [field.name for field in fields(MinedPositives)])
        return MinedPositives(**got)


def write_mined(mined: MinedPositives, folder: str, anchors: int, batch: int,
                token: str = "") -> MinedFiles:
    """Write ``mined`` (rows sorted by anchor row, as mined) block by block: one file per
    block of ``batch`` of the ``anchors`` anchors, each put whole (an object, or a file
    renamed into place); what a block then reads (:meth:`MinedFiles.read`)."""
    from pairkit.core.side_files import write_arrays

    blocks = -(-anchors // batch) if anchors else 0
    bounds = np.searchsorted(mined.rows, np.arange(blocks + 1, dtype=np.int64) * batch)
    for b in range(blocks):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        write_arrays(mined_path(folder, b, token),
                     {field.name: getattr(mined, field.name)[lo:hi]
                      for field in fields(MinedPositives)})
    return MinedFiles(str(folder), token, batch, blocks, len(mined))


def block_mined(mined: MinedPositives | MinedFiles | None, span: tuple[int, int]
                ) -> MinedPositives | None:
    """The mined positives a block of anchors ``span`` reads: its file's, or the whole
    set's (the block takes its slice), or None."""
    if isinstance(mined, MinedFiles):
        return mined.read(span)
    return mined


def remove_mined(url: str, blocks: int, token: str) -> None:
    """Remove the run's mined-positive objects of its ``blocks`` blocks beside the
    dataset at ``url`` (best effort: any left over go with the writer's ``token``; a
    local run's go with its parts folder)."""
    from pairkit.core.side_files import remove_objects

    remove_objects(mined_path(url, b, token) for b in range(blocks))
