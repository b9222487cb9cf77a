"""A real S3-compatible server for the tests: moto's standalone ``moto_server``, started
as a child process on 127.0.0.1 at a free port, killed at the end of the session.

Tests that need it take the ``s3`` fixture (tests/conftest.py): a fresh bucket URL with
``AWS_ENDPOINT_URL`` and dummy credentials set, so pairkit (through s3fs/botocore) talks
to this server and nothing else. Without ``moto[server]`` and ``s3fs`` (the dev extra)
the tests skip with the reason; with them, a server that does not start is an error.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_SESSION_TOKEN": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _executable() -> str | None:
    here = Path(sys.executable).with_name("moto_server")
    return str(here) if here.exists() else shutil.which("moto_server")


@contextlib.contextmanager
def moto_server(wait_s: float = 60.0) -> Iterator[str | None]:
    """Yield the endpoint URL of a running server, or None when ``moto[server]`` or
    ``s3fs`` is not installed. Installed but not answering within ``wait_s`` seconds is
    an error (RuntimeError), not a None: the S3 tests must fail there, not skip."""
    exe = _executable()
    try:
        import s3fs  # noqa: F401
    except ImportError:
        exe = None
    if exe is None:
        yield None
        return
    port = _free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + wait_s
        up = False
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=0.5):
                up = True
                break
            time.sleep(0.1)
        if not up:
            code = proc.poll()
            raise RuntimeError(f"moto_server did not answer on 127.0.0.1:{port} within "
                               f"{wait_s:.0f} s" + ("" if code is None else
                                                     f" (it exited with {code})"))
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
