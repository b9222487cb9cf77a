"""Ctrl-C: every command stops with ``error: interrupted``, exit 130, no traceback, and
leaves no output or temp file, wherever the interrupt lands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import random_store
from tests.proc import REPO, child_env

runner = CliRunner()


def test_ctrl_c_while_click_parses_a_commands_options_is_one_line(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """Failed before: Typer turned a KeyboardInterrupt outside the command's own handler
    (here while the options are checked) into exit 130 without a word."""
    import pairkit.core.options as options

    store = random_store(tmp_path / "store", n_sources=10)

    def interrupted(*args, **kwargs) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(options, "check_values", interrupted)
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-o", str(tmp_path / "p.csv")])
    assert (r.exit_code, r.output) == (130, "error: interrupted\n")
    assert not (tmp_path / "p.csv").exists()


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40,000 rows of 64: mine --hard takes several seconds on one thread."""
    return random_store(tmp_path_factory.mktemp("interrupt") / "store", n_sources=20_000,
                        dim=64).root


def wait_until_mapped(pid: int, name: str, timeout: float = 60.0) -> None:
    """Wait until process ``pid`` has memory-mapped a file called ``name`` (it opened the
    store: its command line is loaded and its handlers are in place)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name in Path(f"/proc/{pid}/maps").read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{name} not mapped by the child in {timeout} s")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("after", [0.0, 1.0])
def test_sigint_to_a_running_mine_exits_130_with_one_line_and_no_file(
        big_store: Path, tmp_path: Path, after: float) -> None:
    """SIGINT as the store is opened and a second later (searching). (Before, a SIGINT a
    second after the start, while the command line loaded, gave exit 130 and nothing on
    stderr: the test above. One in Python's own start-up, before pairkit's first line
    runs, is Python's traceback and exit -2: docs/development.md.)"""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "pairkit", "mine", str(big_store),
                             "--hard", "-o", str(out / "pairs.parquet")],
                            cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until_mapped(proc.pid, "embeddings-00000.npy")
        time.sleep(after)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, (after, proc.returncode, stderr)
    assert stderr == "error: interrupted\n" and stdout == "", (after, stderr)
    assert os.listdir(out) == []


# a pairkit whose atomic writes of pairs.csv wait two minutes once the temp file is made
SLOW_WRITE = """
import contextlib, pathlib, time
import pairkit.core.atomic as atomic
plain = atomic.atomic_path

@contextlib.contextmanager
def slow(target, *args, **kwargs):
    with plain(target, *args, **kwargs) as tmp:
        if pathlib.Path(target).name == "pairs.csv":
            time.sleep(120)
        yield tmp

atomic.atomic_path = slow
from pairkit.cli import entry
entry()
"""


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX")
def test_sigterm_while_writing_removes_the_temp_file_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM (``timeout``, a scheduler) as the output's temp file is written. Before, the
    process died by the signal (-15) and left ``.pairs.csv.XXXXXXXX.tmp`` beside ``-o``;
    now it stops as Ctrl-C does: one line, exit 128 + 15, nothing left."""
    store = random_store(tmp_path / "store", n_sources=10)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, "mine", str(store.root),
                             "--hard", "-o", str(out / "pairs.csv")],
                            cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not os.listdir(out):
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            time.sleep(0.02)
        [temp] = os.listdir(out)
        assert temp.startswith(".pairs.csv.") and temp.endswith(".tmp")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, stderr, stdout) == (143, "error: terminated\n", "")
    assert os.listdir(out) == []
