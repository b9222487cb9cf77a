"""``ruff check pairkit tests`` looks at every Python file of both (ruff skips folders
named like build outputs, ``dist`` and ``build``, unless they are configured back in)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> str | None:
    here = Path(sys.executable).with_name("ruff")
    return str(here) if here.exists() else shutil.which("ruff")


def test_ruff_checks_every_python_file():
    exe = ruff()
    if exe is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run([exe, "check", "--show-files", "pairkit", "tests"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    seen = {Path(line.strip()).resolve() for line in out.splitlines() if line.strip()}
    files = {p.resolve() for top in ("pairkit", "tests") for p in (ROOT / top).rglob("*.py")}
    missed = sorted(str(p.relative_to(ROOT)) for p in files - seen)
    assert not missed, f"ruff skips {missed[:5]}"
    assert any("distributed" in p.parts for p in seen)
