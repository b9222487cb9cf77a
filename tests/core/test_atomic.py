"""Atomic writes: a full disk says so in one line and loses nothing; stale temps of
killed writers are recognised."""

from __future__ import annotations

import errno
import os
import shutil
from collections import namedtuple

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.atomic import (
    TEMP_RE,
    atomic_path,
    is_disk_full,
    remove_stale_temps,
    scratch_folder,
    swap_folder,
)
from pairkit.core.store import Store
from pairkit.core.tables import read_table, write_table
from pairkit.errors import PairkitError

runner = CliRunner()
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


@needs_dev_full
def test_a_real_enospc_becomes_one_line_and_the_target_survives(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"committed")
    with pytest.raises(PairkitError) as info, atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        with open("/dev/full", "wb") as fh:  # the kernel answers ENOSPC
            fh.write(b"x" * 65536)
            fh.flush()
    assert str(info.value) == (f"disk full while writing {target}: free space and rerun; "
                               "nothing was lost")
    assert target.read_bytes() == b"committed"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_errors_without_errno_are_judged_by_free_space(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    short = OSError("110592 requested and 96192 written")  # numpy's message, errno lost
    torch_like = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10, 10, 0))
    assert is_disk_full(short, tmp_path) and is_disk_full(torch_like, tmp_path)
    assert not is_disk_full(PermissionError(errno.EACCES, "denied"), tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10, 0, 1 << 40))
    assert not is_disk_full(short, tmp_path)
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert is_disk_full(OSError("Error writing bytes to file. Detail: [errno 28] No space "
                                "left on device"), tmp_path)


def test_disk_full_during_import_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    np.save(tmp_path / "emb.npy", np.eye(3, dtype=np.float32))
    pd.DataFrame({"path": ["a.jpg", "b.jpg", "c.jpg"]}).to_csv(tmp_path / "items.csv",
                                                              index=False)

    def full(*args, **kwargs):  # noqa: ANN002, ANN003
        raise OSError(errno.ENOSPC, "No space left on device")

    # the shard's blocks are written, then the file is synced: a full disk (delayed
    # allocation) can answer either; the writer streams the blocks itself (no np.save)
    monkeypatch.setattr("pairkit.core.store_writer.os.fsync", full)
    out = tmp_path / "s"
    r = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                            str(tmp_path / "items.csv"), "-o", str(out)])
    assert r.exit_code == 1
    assert r.output.strip() == (f"error: disk full while writing {out}/embeddings-00000.npy: "
                                "free space and rerun; nothing was lost")
    assert not out.exists()
    monkeypatch.undo()
    r = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                            str(tmp_path / "items.csv"), "-o", str(out)])
    assert r.exit_code == 0 and Store.open(out).count == 3


def test_remove_stale_temps_only_removes_named_targets(tmp_path):
    names = [".manifest.json.abcd1234.tmp", ".a.npy.abcd1234.tmp", ".manifest.json.tmp",
             "manifest.json.abcd1234.tmp", ".manifest.json.ABCD1234.tmp"]
    for n in names:
        (tmp_path / n).write_text("x")
    removed = remove_stale_temps(tmp_path, lambda target: target == "manifest.json")
    assert removed == [".manifest.json.abcd1234.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])


def test_no_replace_commit_refuses_a_file_that_appeared(tmp_path):
    """Issue 20.5: an output checked free at the start and written by another run before
    this one's rename is kept, and this run says so."""
    from pairkit.core.atomic import atomic_path
    from pairkit.errors import PairkitError

    target = tmp_path / "out.csv"
    with atomic_path(target, replace=False) as tmp:
        tmp.write_text("mine")
    assert target.read_text() == "mine"
    with pytest.raises(PairkitError, match="written by another run meanwhile"), \
            atomic_path(target, replace=False) as tmp:
        tmp.write_text("second")
    assert target.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    with atomic_path(target) as tmp:  # replace=True (--force) replaces
        tmp.write_text("forced")
    assert target.read_text() == "forced"



def test_a_folder_made_read_only_names_the_target_not_the_temp(tmp_path, monkeypatch):
    real_open = os.open

    def refuse(path: object, *a: object, **k: object) -> int:
        if os.path.basename(str(path)).startswith(".t.parquet."):  # the temp, as root can
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", refuse)
    target = tmp_path / "t.parquet"
    with pytest.raises(PermissionError) as info, atomic_path(target):
        pass
    monkeypatch.undo()
    assert info.value.filename == str(target)
    assert os.listdir(tmp_path) == []


def test_free_space_is_judged_before_the_failed_temp_is_removed(tmp_path, monkeypatch):
    """Found by a bug hunt (2026-12-06): the temp file was removed first, which freed the
    space it held, so a short write (numpy's message, no errno) on a full disk was called
    an internal error."""
    usage = namedtuple("usage", "total used free")
    held: list = []

    def disk_usage(_):
        full = any(p.exists() for p in held)
        return usage(10, 10, 0 if full else 1 << 40)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    target = tmp_path / "shard.npy"
    with pytest.raises(PairkitError, match="disk full while writing"), atomic_path(target) as tmp:
        held.append(tmp)
        tmp.write_bytes(b"x" * 100)
        raise OSError("1920000 requested and 1570752 written")
    assert not target.exists() and not held[0].exists()


def test_a_file_size_limit_is_one_line(tmp_path):
    target = tmp_path / "t.parquet"
    with pytest.raises(PairkitError, match="file too large while writing .*ulimit -f"), \
            atomic_path(target):
        raise OSError(errno.EFBIG, "File too large")
    with pytest.raises(PairkitError, match="file too large while writing"), atomic_path(target):
        raise OSError("Error writing bytes to file. Detail: [errno 27] File too large")

def test_an_atomic_output_has_the_mode_of_any_new_file(tmp_path):
    """mkstemp makes 0600 files; an output written through atomic_path has the mode a
    plain new file gets under the umask (hunt 3b: dropping the chmod survived)."""
    mask = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "out.csv") as tmp:
            tmp.write_text("a")
        with atomic_path(tmp_path / "new.csv", replace=False) as tmp:
            tmp.write_text("a")
    finally:
        os.umask(mask)
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "new.csv").stat().st_mode & 0o777 == 0o644


def test_a_commit_stopped_by_a_taken_name_takes_back_what_it_placed(tmp_path):
    """commit_files without replace: a name taken meanwhile stops the commit, and the
    files it had already put in place are removed, so none of this run's files stay
    (hunt 3b: keeping them survived)."""
    from pairkit.core.atomic import commit_files

    src, out = tmp_path / "tmp", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (src / name).write_text("new " + name)
    (out / "b.txt").write_text("theirs")
    with pytest.raises(PairkitError, match="written by another run meanwhile"):
        commit_files(src, ["a.txt", "b.txt", "c.txt"], out, replace=False)
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert (out / "b.txt").read_text() == "theirs"
    # with replace, every file is put in place over what is there
    for name in ("a.txt", "b.txt", "c.txt"):
        (src / name).write_text("new " + name)
    commit_files(src, ["a.txt", "b.txt", "c.txt"], out, replace=True)
    assert [(out / n).read_text() for n in ("a.txt", "b.txt", "c.txt")] == [
        "new a.txt", "new b.txt", "new c.txt"]


def test_killed_table_writers_temps_are_swept_when_stale(tmp_path):
    """hunt-n 10: a killed `mine -o x.jsonl` (or dedup, search, issues) left
    .x.jsonl.XXXXXXXX.tmp beside the output for good. The next writer of that output
    removes its own stale ones (a day old); a live writer's, and other names, stay."""
    import time

    from pairkit.core.tables import write_table

    stale = [tmp_path / ".x.jsonl.abcd1234.tmp", tmp_path / ".x.jsonl.zz_99xy8.tmp"]
    young = tmp_path / ".x.jsonl.efgh5678.tmp"
    others = [tmp_path / ".y.jsonl.abcd1234.tmp", tmp_path / ".x.jsonl.tmp",
              tmp_path / "x.jsonl.abcd1234.tmp"]
    for p in [*stale, young, *others]:
        p.write_text("partial")
    old = time.time() - 2 * 86400
    for p in [*stale, *others]:
        os.utime(p, (old, old))
    write_table(pd.DataFrame({"a": [1, 2]}), tmp_path / "x.jsonl")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["x.jsonl", young.name, *(p.name for p in others)])
    # a dataset folder's: its killed writer left a folder of parts
    parts = tmp_path / ".ds.abcd1234.tmp"
    parts.mkdir()
    (parts / "part-00000.parquet").write_text("partial")
    os.utime(parts, (old, old))
    write_table(pd.DataFrame({"a": [1, 2]}), str(tmp_path / "ds") + "/")
    assert not parts.exists() and (tmp_path / "ds").is_dir()


def test_ctrl_c_right_after_the_temp_is_made_leaves_none(tmp_path, monkeypatch):
    """An interrupt between making the temp file and the write's own try (here: as its
    descriptor is closed) leaves no temp beside the target (failed before: the temp was
    made and closed before the try that removes it)."""
    real_close = os.close
    closed: list[int] = []

    def close(fd: int) -> None:
        real_close(fd)
        if not closed:
            closed.append(fd)
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "close", close)
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "pairs.parquet"):
        pass
    monkeypatch.undo()
    assert closed and os.listdir(tmp_path) == []


def test_ctrl_c_right_after_a_dataset_folder_is_made_leaves_none(tmp_path, monkeypatch):
    """An interrupt as the temp folder of a dataset output is made (after mkdir, before
    the write's try) leaves no folder beside the target (failed before: the folder was
    made before the try that removes it)."""
    from pathlib import Path

    real_mkdir = Path.mkdir
    made: list[Path] = []

    def mkdir(self: Path, *args, **kwargs) -> None:
        real_mkdir(self, *args, **kwargs)
        if self.name.endswith(".tmp") and not made:
            made.append(self)
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(KeyboardInterrupt):
        write_table(pd.DataFrame({"a": [1, 2]}), str(tmp_path / "ds") + "/")
    monkeypatch.undo()
    assert made and os.listdir(tmp_path) == []


@pytest.mark.parametrize("signal", [KeyboardInterrupt, OSError])
def test_a_replaced_dataset_stays_when_the_swap_is_interrupted(tmp_path, monkeypatch, signal):
    """Replacing a dataset folder renames the old one aside, then the new one into place;
    an interrupt (or a failure) between the two renames puts the old one back (failed
    before: the old table was left in a hidden .old folder and the output was gone)."""
    target = str(tmp_path / "ds") + "/"
    write_table(pd.DataFrame({"a": [1, 2]}), target)
    real_replace = os.replace
    calls: list[tuple[str, str]] = []
    folder = str(tmp_path / "ds")

    def replace(src, dst) -> None:
        if folder in (str(src), str(dst)):
            calls.append((str(src), str(dst)))
            if len(calls) == 2:  # the new folder into place, the old one gone aside
                raise signal("interrupted")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(signal):
        write_table(pd.DataFrame({"a": [3, 4, 5]}), target, force=True)
    monkeypatch.undo()
    assert calls[0][0] == folder and calls[1][1] == folder  # aside, then the new one
    assert read_table(target)["a"].tolist() == [1, 2]
    assert os.listdir(tmp_path) == ["ds"]  # no temp or .old folder left either


def test_swap_folder_replaces_and_leaves_nothing_beside(tmp_path):
    place, new = tmp_path / "out", tmp_path / ".out.abcdefgh.tmp"
    place.mkdir()
    (place / "old.txt").write_text("old")
    new.mkdir()
    (new / "new.txt").write_text("new")
    swap_folder(new, place)
    assert os.listdir(place) == ["new.txt"] and os.listdir(tmp_path) == ["out"]
    again = tmp_path / ".out.zzzzzzzz.tmp"
    again.mkdir()
    shutil.rmtree(place)
    swap_folder(again, place)  # nothing there: one rename
    assert os.listdir(tmp_path) == ["out"] and os.listdir(place) == []


def test_scratch_folder_is_removed_with_its_contents_and_private(tmp_path):
    with scratch_folder(tmp_path / "out") as tmp:
        assert tmp.parent == tmp_path and TEMP_RE.match(tmp.name)
        assert (tmp.stat().st_mode & 0o777) == 0o700
        (tmp / "part").write_text("x")
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError), scratch_folder(tmp_path / "out") as tmp:
        raise RuntimeError
    assert os.listdir(tmp_path) == []


def test_a_file_output_ending_in_a_slash_is_refused_not_written_as_a_file(tmp_path):
    """Found by a bug hunt (2026-12-08): ``Path("DIR/")`` drops the slash, so a file output
    named as a folder that did not exist (``mine --stats DIR/``, ``dedup --paths-only -o
    DIR/``) was written as a plain file DIR. A usage error (exit 2) for every file output."""
    from pairkit.core.atomic import check_output
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match=r"^stats file .*/new/ ends in /, a folder: "
                       r"expected a file path$"):
        check_output(f"{tmp_path / 'new'}/", False, what="stats file")
    assert not (tmp_path / "new").exists()
    assert check_output(tmp_path / "new", False) == tmp_path / "new"
