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


def with_repo_path(*first: str | os.PathLike[str]) -> str:
    """PYTHONPATH for a child: this checkout (and ``first``) before what was already on
    it, so packages installed beside the interpreter's (a --target folder, as on the GPU
    host) stay importable."""
    parts = [*map(str, first), str(REPO), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = with_repo_path()
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def run_pairkit(*args: object, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m pairkit ARGS`` in a child; raises subprocess.TimeoutExpired on a hang."""
    return subprocess.run([sys.executable, "-m", "pairkit", *map(str, args)], cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=timeout)


HEAVY_MODULES = ("torch", "faiss", "open_clip", "timm")


def exit_codes_in_one_child(runs: list[list[str]], timeout: float = 120,
                            modules: tuple[str, ...] = HEAVY_MODULES
                            ) -> tuple[list[object], list[str], str]:
    """Run each argument list through pairkit's app in one fresh interpreter: the exit
    codes, the heavy ``modules`` (:data:`HEAVY_MODULES`) imported by then, and stderr."""
    import json

    code = (
        "import json, sys\n"
        "from pairkit.cli.main import app\n"
        "codes = []\n"
        f"for args in {runs!r}:\n"
        "    try:\n"
        "        app(args=args, prog_name='pairkit')\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        f"print(json.dumps([codes, sorted(m for m in {modules!r} if m in sys.modules)]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), cwd=REPO, timeout=timeout)
    codes, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    return codes, heavy, proc.stderr


def start_python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    """Start ``python -c CODE`` in a child (stdin, stdout piped)."""
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def error_lines(text: str) -> list[str]:
    """The non-empty lines of a child's stderr."""
    return [line for line in text.splitlines() if line.strip()]
