"""A head folder while it is trained: its files, the refusal or clearing of an existing
one, the per-epoch log, and the content of its config.json.

Reading a finished head back is :func:`pairkit.train.head.load_head`; the checkpoint
that ``--resume`` reads is :mod:`pairkit.train.resume`.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pairkit import __version__
from pairkit.core.atomic import TEMP_RE, atomic_open, remove_stale_temps, scratch_folder
from pairkit.core.integrity import read_json_file
from pairkit.core.lock import LOCK_NAME
from pairkit.errors import PairkitError
from pairkit.train.head import (
    CONFIG,
    HEAD_FORMAT,
    HEAD_FORMAT_VERSION,
    WEIGHTS,
    HeadSpec,
    spec_dict,
)
from pairkit.train.output_whitening import FILE as WHITENING

if TYPE_CHECKING:
    from pairkit.core.store import Store
    from pairkit.train.config import TrainConfig

CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"
PLOT = "train_plot.png"
HEAD_FILES = (WEIGHTS, CONFIG, LOG, PLOT, CHECKPOINT, WHITENING)
STAGE = "epoch"  # the first save of a run replacing a head: HEAD/.epoch.XXXXXXXX.tmp/


def _is_head_file(name: str) -> bool:
    return name in HEAD_FILES


def check_head_output(out: Path, force: bool, resume: bool) -> set[str]:
    """Refuse an existing head without ``force``/``resume`` (and a file, another folder, a
    resume without a checkpoint); returns the head's file names (temp files of killed
    runs count as nothing). A folder of pairkit's head files with neither config.json nor
    checkpoint.pt (a new run whose first save failed) commits nothing: like an empty one,
    it is taken without ``force``. Light: train calls it before torch loads, and again
    under the head's lock (:func:`prepare_head_dir`)."""
    if out.exists() and not out.is_dir():
        raise PairkitError(f"output {out} is an existing file, expected a head folder")
    names = {e.name for e in out.iterdir()} - {LOCK_NAME} if out.is_dir() else set()
    temps = {n for n in names if n.startswith(".") and n.endswith(".tmp")}
    if not names - temps:
        if resume:
            raise PairkitError(f"--resume: {out} holds no checkpoint to resume from")
        return names
    ours = {n for n in names if n in HEAD_FILES} | temps
    if names - ours:
        raise PairkitError(f"output {out} is a folder that is not a pairkit head; choose "
                           "another path")
    if resume:
        if CHECKPOINT not in names:
            raise PairkitError(f"--resume: {out} holds no {CHECKPOINT} (no epoch was "
                               "completed)")
        return names
    if not names & {CONFIG, CHECKPOINT}:
        return names  # nothing committed: the new run clears it at its first save
    if not force:
        raise PairkitError(f"head {out} exists; pass --force to replace it or --resume to "
                           "continue it")
    return names


def prepare_head_dir(out: Path, force: bool, resume: bool) -> set[str]:
    """Refuse an existing head without ``force``/``resume``; returns the names of the old
    head's files that ``force`` replaces (none with ``resume``).

    Call under the head's writer lock: temp files of killed runs are removed first (a
    folder holding nothing else counts as empty). The old files are left in place:
    :func:`save_replacing` replaces them once the new run's first epoch is saved whole,
    so a run that fails before that (a NaN, Ctrl-C, out of memory, a full disk) keeps
    the old head.
    """
    if out.is_dir():
        remove_stale_temps(out, _is_head_file)
        for entry in out.iterdir():  # a first save of a killed run
            m = TEMP_RE.match(entry.name)
            if m and m.group("target") == STAGE and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
    names = check_head_output(out, force, resume)
    return set() if resume else names


def clear_head_files(out: Path, names: set[str]) -> None:
    """Remove the old head's files ``names`` (:func:`prepare_head_dir`), config.json first:
    a folder without it is no finished head, whatever else is left."""
    for name in sorted(names, key=lambda n: n != CONFIG):
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def save_replacing(out: Path, old: set[str], save: Callable[..., None], *args: Any) -> None:
    """The first save of a run that replaces the head in ``out`` (``--force``; ``old``:
    the old head's files): ``save(folder, *args)`` writes the epoch into a temp folder in
    ``out``; only when it is whole do its files take the old ones' places, config.json
    removed first and put back last (a folder without it is no finished head), and the
    old head's other files go. A save that fails (a full disk, Ctrl-C) leaves the old
    head as it was, and its error names the head's own file."""
    with scratch_folder(out / STAGE) as stage:
        try:
            save(stage, *args)
        except PairkitError as exc:  # "disk full while writing HEAD/checkpoint.pt"
            raise PairkitError(str(exc).replace(str(stage), str(out))) from exc
        new = {p.name for p in stage.iterdir()}
        (out / CONFIG).unlink(missing_ok=True)
        for name in sorted(new - {CONFIG}):
            os.replace(stage / name, out / name)
        clear_head_files(out, old - new)
        if CONFIG in new:
            os.replace(stage / CONFIG, out / CONFIG)


def json_record(record: dict[str, Any]) -> str:
    """One epoch record as strict JSON (NaN/inf -> null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in record.items()}
    return json.dumps(clean, allow_nan=False)


def write_log(out: Path, records: list[dict[str, Any]]) -> None:
    """Write ``train_log.jsonl`` (one :func:`json_record` per epoch) atomically."""
    with atomic_open(out / LOG) as fh:
        for r in records:
            fh.write(json_record(r) + "\n")


def read_log(out: Path) -> list[dict[str, Any]]:
    """The records of ``train_log.jsonl`` (empty when there is none)."""
    p = out / LOG
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]


def read_config(out: Path) -> dict[str, Any]:
    """config.json of a head folder ({} when missing); PairkitError when unreadable or
    when it holds JSON that is no object (malformed: not a config lost to a kill)."""
    if not (out / CONFIG).is_file():
        return {}
    try:
        old = read_json_file(out / CONFIG, 16 << 20, "head config")
    except (OSError, PairkitError) as exc:
        raise PairkitError(f"--resume: {out / CONFIG} is unreadable ({exc})") from None
    if not isinstance(old, dict):
        held = ("JSON null" if old is None else "a JSON " + {
            list: "array", str: "string", bool: "boolean"}.get(type(old), "number"))
        raise PairkitError(f"--resume: {out / CONFIG} is malformed: it holds {held}, not a "
                           "JSON object: rerun without --resume (and with --force)")
    return old


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def head_config(cfg: TrainConfig, spec: HeadSpec, store: Store, pairs_id: dict[str, Any],
                fingerprint: dict[str, Any], *, device: str, precision: str, streaming: bool,
                epochs_done: int, complete: bool, stopped: str | None,
                whitening: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of a head's config.json after ``epochs_done`` epochs: architecture,
    loss, training options (as run: device, precision, streaming), the store, the pairs,
    the output whitening (format version 2; none: version 1, which older pairkits read)
    and the run's fingerprint (what ``--resume`` compares)."""
    training = asdict(cfg)
    training.pop("loss")
    for key in ("head", "out_dim", "hidden"):
        training.pop(key)
    training.update(device=device, precision=precision, streaming=streaming)
    return {
        "format": HEAD_FORMAT, "format_version": HEAD_FORMAT_VERSION if whitening else 1,
        "pairkit_version": __version__, "written": _now(),
        "head": spec_dict(spec), "whitening": whitening, "loss": asdict(cfg.loss),
        "training": training,
        "store": {"path": str(store.root), "content_id": store.content_id,
                  "manifest_hash": store.manifest_hash, "dim": store.dim,
                  "count": store.count, "encoder": store.encoder},
        "pairs": pairs_id, "epochs_done": epochs_done, "complete": complete,
        "stopped": stopped, "fingerprint": fingerprint,
    }
