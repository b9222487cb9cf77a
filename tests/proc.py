"""Running pairkit (or a Python snippet) in a child process, with a timeout.

For the tests that need a second process (locks, readers during a write, kill -9) or a
guard against hangs (FIFOs, devices).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def run_pairkit(*args: object, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m pairkit ARGS`` in a child; raises subprocess.TimeoutExpired on a hang."""
    return subprocess.run([sys.executable, "-m", "pairkit", *map(str, args)], cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=timeout)


def start_python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    """Start ``python -c CODE`` in a child (stdin, stdout piped)."""
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def error_lines(text: str) -> list[str]:
    """The non-empty lines of a child's stderr."""
    return [line for line in text.splitlines() if line.strip()]
