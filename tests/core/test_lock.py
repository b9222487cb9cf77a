"""One writer per store or head folder: every writing command, against other processes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.lock import LOCK_NAME, LockHeld, writer_lock
from pairkit.core.store import Store
from tests.conftest import make_images, random_store
from tests.proc import error_lines, start_python

runner = CliRunner()

HOLD = """
import sys
from pairkit.core.lock import writer_lock
with writer_lock(sys.argv[1], "store"):
    print("locked", flush=True)
    sys.stdin.read()   # hold until the test closes stdin (or kills us)
"""


def hold(folder: Path):
    """A child process holding ``folder``'s writer lock until its stdin closes."""
    proc = start_python(HOLD.replace("sys.argv[1]", repr(str(folder))))
    assert proc.stdout.readline().strip() == "locked", proc.stderr.read()
    return proc


def release(proc) -> None:  # noqa: ANN001
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def refused(result, holder) -> None:  # noqa: ANN001
    """Exit 1 with one line that names the holder's pid and command."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert f"is being written by pid {holder.pid} on " in lines[0]
    assert "-c" in lines[0] and lines[0].startswith("error: ")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A store and a head trained on it (for project)."""
    root = tmp_path_factory.mktemp("lock")
    store = random_store(root / "store", n_sources=12, views=2, dim=8)
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o",
                            str(root / "head"), "--epochs", "1", "--device", "cpu", "-q"])
    assert r.exit_code == 0, r.output
    return store, root / "head"


def test_every_writer_refuses_a_held_folder(tmp_path, trained):
    store, head = trained
    images = tmp_path / "images"
    make_images(images, n_per_class=1, classes=2)
    np.save(tmp_path / "emb.npy", np.eye(3, dtype=np.float32))
    pd.DataFrame({"path": ["a.jpg", "b.jpg", "c.jpg"]}).to_csv(tmp_path / "items.csv",
                                                              index=False)
    out = tmp_path / "out"
    holder = hold(out)
    try:
        refused(runner.invoke(app, ["embed", str(images), "-o", str(out), "--model", "fake",
                                    "-q"]), holder)
        refused(runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                    str(tmp_path / "items.csv"), "-o", str(out)]), holder)
        refused(runner.invoke(app, ["project", str(store.root), "--head", str(head), "-o",
                                    str(out), "--device", "cpu"]), holder)
        refused(runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o",
                                    str(out), "--epochs", "1", "--device", "cpu"]), holder)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing was written
    finally:
        release(holder)
    assert not out.exists()  # the holder created it and left it empty
    holder = hold(store.root)
    try:
        refused(runner.invoke(app, ["index", str(store.root), "--index", "flat"]), holder)
        refused(runner.invoke(app, ["embed", str(images), "-o", str(store.root), "--model",
                                    "fake", "--force", "-q"]), holder)
        assert Store.open(store.root).count == store.count  # readers are never blocked
    finally:
        release(holder)
    r = runner.invoke(app, ["index", str(store.root), "--index", "flat", "-q"])
    assert r.exit_code == 0, r.output
    assert not (store.root / LOCK_NAME).exists()


def test_a_killed_holder_does_not_block(tmp_path):
    holder = hold(tmp_path / "s")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert (tmp_path / "s" / LOCK_NAME).exists()  # left behind, but no longer locked
    with writer_lock(tmp_path / "s") as lock:
        info = json.loads((tmp_path / "s" / LOCK_NAME).read_text())
        assert info["pid"] == os.getpid() and lock.depth == 1
        with writer_lock(tmp_path / "s") as again:  # re-entrant within a process
            assert again is lock and lock.depth == 2
    assert not (tmp_path / "s" / LOCK_NAME).exists()


def test_lock_held_message_in_process(tmp_path):
    holder = hold(tmp_path / "s")
    try:
        with pytest.raises(LockHeld, match=rf"store .*s is being written by pid {holder.pid}"), \
                writer_lock(tmp_path / "s", "store"):
            pass
    finally:
        release(holder)


def test_two_embeds_racing_while_files_are_added(tmp_path):
    """The fault probe's case: two embeds into one store while the folder grows. Each run
    either embeds or stops with the holder's name; the store ends valid and complete."""
    images = tmp_path / "images"
    make_images(images, n_per_class=6, classes=2, seed=1)
    out = tmp_path / "store"
    first = runner.invoke(app, ["embed", str(images), "-o", str(out), "--model", "pixels",
                                "-q", "--shard-rows", "4"])
    assert first.exit_code == 0, first.output
    make_images(tmp_path / "more", n_per_class=6, classes=2, seed=2)
    for p in (tmp_path / "more").rglob("*.*"):
        p.rename(p.with_name("new-" + p.name).as_posix().replace("/more/", "/images/"))
    procs = [start_python(
        "import sys; from pairkit.cli.main import main; sys.argv = ['pairkit', 'embed', "
        f"{str(images)!r}, '-o', {str(out)!r}, '--model', 'pixels', '-q', '--shard-rows', "
        "'4']; main()") for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for code, err in results:
        assert code in (0, 1), err
        if code == 1:
            assert len(error_lines(err)) == 1 and "is being written by pid" in err, err
    assert 0 in [code for code, _ in results]
    again = runner.invoke(app, ["embed", str(images), "-o", str(out), "--model", "pixels",
                                "--shard-rows", "4"])
    assert again.exit_code == 0 and "nothing to embed: all 24 images" in again.output, again
    store = Store.open(out)
    assert store.count == 24 and store.items["source"].is_unique
    assert sorted(store.items["path"]) == sorted(
        p.relative_to(images).as_posix() for p in images.rglob("*.*"))


def test_another_thread_of_the_process_is_refused(tmp_path):
    """Re-entrance holds within the thread that holds the lock only: a second thread of
    the same process gets the refusal a second process gets, and ``is_held`` is per thread."""
    import threading

    from pairkit.core.lock import is_held

    folder = tmp_path / "s"
    seen: dict[str, object] = {}

    def other() -> None:
        seen["held"] = is_held(folder)
        try:
            with writer_lock(folder, "store"):
                seen["result"] = "locked"
        except LockHeld as exc:
            seen["result"] = str(exc)

    with writer_lock(folder, "store") as lock:
        assert is_held(folder)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=30)
        assert lock.depth == 1
    assert seen["held"] is False
    assert isinstance(seen["result"], str) and "is being written by pid" in seen["result"]
    assert str(os.getpid()) in seen["result"] and "\n" not in seen["result"]
    assert not folder.exists()  # released and removed: the other thread left nothing
    with writer_lock(folder, "store") as lock:  # free again afterwards
        assert lock.depth == 1


def test_threads_racing_for_one_lock_never_share_it(tmp_path):
    """Many threads taking one folder's lock at once: at most one is inside at a time."""
    import threading

    folder = tmp_path / "s"
    inside = 0
    most = 0
    guard = threading.Lock()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker() -> None:
        nonlocal inside, most
        start.wait()
        for _ in range(50):
            try:
                with writer_lock(folder, "store"):
                    with guard:
                        inside += 1
                        most = max(most, inside)
                    with writer_lock(folder, "store"):  # re-entrant in the holding thread
                        pass
                    with guard:
                        inside -= 1
            except LockHeld:
                pass
            except BaseException as exc:  # noqa: BLE001 - anything else fails the test
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    [t.start() for t in threads]
    [t.join(timeout=60) for t in threads]
    assert errors == []  # (a thread's error was only a pytest warning before)
    assert most == 1
    assert not folder.exists() or not any(folder.iterdir())  # no lock file left behind


def test_a_folder_made_for_the_lock_goes_and_one_that_was_there_stays(tmp_path):
    """Mutation audit 4a (LK7): a run that leaves nothing removes only the folder its lock
    created, never an empty folder the user made beforehand."""
    from pairkit.core.lock import LOCK_NAME, writer_lock

    made, mine = tmp_path / "new", tmp_path / "mine"
    mine.mkdir()
    for folder in (made, mine):
        with writer_lock(folder):
            assert (folder / LOCK_NAME).exists()
    assert not made.exists()
    assert mine.is_dir() and list(mine.iterdir()) == []


def test_a_folder_gone_between_mkdir_and_its_check_is_retried(tmp_path, monkeypatch):
    """A holder that created the folder removes it on release; another thread's
    ``mkdir(exist_ok=True)`` can find it there and then not a folder any more, and raise
    FileExistsError. The lock tries again (failed before: "can't write in store ... (File
    exists)", seen in the racing test above as a thread's exception)."""
    from pathlib import Path

    from pairkit.core.lock import writer_lock

    real = Path.mkdir
    raised = []

    def racing(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if not raised:
            raised.append(self)
            raise FileExistsError(17, "File exists", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing)
    folder = tmp_path / "s"
    with writer_lock(folder, "store") as lock:
        assert lock.depth == 1 and folder.is_dir()
    assert raised == [folder] and not folder.exists()
