"""The two commands: `make demo` and `make test` set up .venv once and reuse it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def fake_venv(venv: Path, log: Path) -> None:
    """A .venv whose python records its arguments instead of installing anything."""
    (venv / "bin").mkdir(parents=True)
    script = f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n'
    for name in ("python", "pairkit", "ruff"):
        path = venv / "bin" / name
        path.write_text(script)
        path.chmod(0o755)


def make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_env_installs_once_then_reuses(tmp_path: Path) -> None:
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    fake_venv(venv, log)
    first = make("env", f"VENV={venv}")
    assert first.returncode == 0, first.stderr
    calls = log.read_text().splitlines()
    # torch first, pinned; then pairkit with its test tools, editable
    assert calls == ["python -m pip install -q torch==2.14.1 torchvision==0.29.1",
                     "python -m pip install -q -e .[dev]"]
    stamp = (venv / ".pairkit-installed").read_text()
    second = make("env", f"VENV={venv}")
    assert second.returncode == 0 and "is up to date" in second.stdout
    assert log.read_text().splitlines() == calls  # nothing installed again
    # another torch pin (or a changed pyproject.toml / Makefile) changes the stamp: reinstall
    third = make("env", f"VENV={venv}", "TORCH=torch==2.9.1")
    assert third.returncode == 0 and len(log.read_text().splitlines()) == 4
    assert (venv / ".pairkit-installed").read_text() != stamp


def test_failed_install_leaves_no_stamp(tmp_path: Path) -> None:
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    fake_venv(venv, log)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    r = make("env", f"VENV={venv}")
    assert r.returncode != 0 and not (venv / ".pairkit-installed").exists()


def test_demo_and_test_targets(tmp_path: Path) -> None:
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    fake_venv(venv, log)
    assert make("test", f"VENV={venv}").returncode == 0
    assert make("demo", f"VENV={venv}").returncode == 0
    calls = log.read_text().splitlines()[2:]  # after the two installs
    assert calls == ["ruff check pairkit tests", "python -m pytest -n 2 --dist worksteal",
                     "pairkit demo demo-run --force"]


def test_readme_and_ci_use_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The two commands"):readme.index("## A tour")]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci[-1] == "make test"
