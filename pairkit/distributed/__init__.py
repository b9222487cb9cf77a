"""Running embed, mine, dedup and eval on a Ray cluster (``--ray ADDRESS``).

A thin layer: the work is split into independent partitions (store shards for embed,
blocks of anchors or queries for mine and dedup, shards of the references for eval) and
Ray runs, on its workers, the same core functions per partition that the local path
runs on the whole; the driver joins the results in partition order, so a run on Ray gives
the same output as a run here. Ray (``pip install 'pairkit[ray]'``) is imported only when
``--ray`` is given. See docs/distributed.md.

- ``local``: start a Ray instance on this machine, ``ray.init(address="local",
  num_cpus=<its CPUs>)``: its own, even where ``RAY_ADDRESS`` or a ``ray start`` names
  another cluster.
- ``auto``: join the cluster this machine is part of (``ray start --head`` / ``--address``).
- ``HOST:PORT`` or ``ray://HOST:10001``: join that cluster.

Each worker is one process with ``pairkit --threads N`` threads (the thread budget of this
command), so a cluster of C CPUs runs C / N workers at a time. Stores and tables must lie
on a path every node sees (a shared file system) or on object storage (``s3://``...):
the workers read the stores themselves (:class:`pairkit.core.store_rows.StoreRows`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pairkit.errors import PairkitError

ENV = "PAIRKIT_RAY_ADDRESS"
# Test hook: the first worker call that finds this file missing creates it and exits the
# worker process at once (os._exit), as a killed worker would; Ray restarts and retries.
CRASH_ENV = "PAIRKIT_TEST_CRASH_ONCE"
# Test hooks, read on the workers (set in the environment of a node): a worker of a node
# started with HOLD_ENV that gets a block writes ``holding-<pid>`` into that folder and
# waits there until it is killed; one of a node with WAIT_ENV waits, before each block,
# until that folder holds such a file. So a test can kill a node while it holds a block.
HOLD_ENV = "PAIRKIT_TEST_HOLD"
WAIT_ENV = "PAIRKIT_TEST_WAIT_FOR_HOLD"
RETRIES = 3  # retries of a partition whose worker died


def require_ray() -> Any:
    """``import ray``, or a one-line error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise PairkitError("--ray needs Ray, which is not installed: pip install "
                           "'pairkit[ray]' (or pip install ray)") from None
    return ray


@dataclass(frozen=True)
class Cluster:
    """A connected Ray cluster as pairkit uses it: ``workers`` processes at a time of
    ``threads`` CPUs each; ``gpus`` in the whole cluster; ``nodes`` machines (alive when
    joined: a folder of one of them, such as its temp folder, is not the others')."""

    address: str
    cpus: int
    gpus: int
    threads: int
    nodes: int = 1

    @property
    def workers(self) -> int:
        return max(1, self.cpus // self.threads)

    def describe(self) -> str:
        gpus = f", {self.gpus} GPUs" if self.gpus else ""
        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        return f"Ray ({self.address}: {self.cpus} CPUs{gpus}; {workers} x {threads})"


def connect(address: str) -> Cluster:
    """Join (``auto``, ``HOST:PORT``, ``ray://...``) or start (``local``) a Ray cluster;
    a process already connected stays on its cluster. PairkitError when it can't."""
    import logging

    from pairkit.core.threads import available_cpus, plan

    ray = require_ray()
    if not address:
        raise PairkitError("--ray needs an address: local, auto or HOST:PORT")
    if not ray.is_initialized():
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False,
                 "include_dashboard": False}
        # with the address from the environment, the user may not know Ray was asked for
        said = (" (PAIRKIT_RAY_ADDRESS is set: it gives --ray when not typed)"
                if os.environ.get(ENV) else "")
        try:
            check_reachable(address)
        except PairkitError as exc:
            raise PairkitError(f"{exc}{said}") from None
        try:
            if address == "local":
                # "local": a new instance even where RAY_ADDRESS or a `ray start` on this
                # machine names a cluster (ray.init() without an address would join it)
                ray.init(address="local", num_cpus=available_cpus(), **quiet)
            else:
                ray.init(address=address, **quiet)
        except Exception as exc:  # ConnectionError, ValueError, RuntimeError ...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise PairkitError(f"can't reach the Ray cluster at {address}: {first}{said}"
                               ) from None
    keep_prints_off_stdout()
    resources = ray.cluster_resources()
    cpus = int(resources.get("CPU", 0))
    if cpus < 1:
        raise PairkitError(f"the Ray cluster at {address} has no CPUs")
    try:
        node_cpus = [int(node.get("Resources", {}).get("CPU", 0)) for node in ray.nodes()
                     if node.get("Alive")]
    except Exception:  # a client that can't list them: one node of every CPU, as before
        node_cpus = [cpus]
    threads = worker_threads(plan().threads, node_cpus or [cpus])
    return Cluster(address, cpus, int(resources.get("GPU", 0)), threads,
                   max(1, len(node_cpus)))


def worker_threads(wanted: int, node_cpus: list[int]) -> int:
    """The CPUs (threads) of one worker: ``wanted`` (``--threads``), at most the CPUs of
    the largest node (a worker asking Ray for more than any node has is never placed, and
    the command waited for it forever), at least 1."""
    return max(1, min(wanted, max(node_cpus)))


def check_reachable(address: str, timeout: float = 10.0) -> None:
    """PairkitError within ``timeout`` seconds when ``HOST:PORT`` does not answer, or
    answers but not as a gRPC server (Ray's own connect retried for ~14 minutes and
    printed its C++ warnings); ``local``,
    ``auto`` and ``ray://`` addresses are left to Ray."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    if not host:  # Ray logged a traceback for it ("Malformed host") above the refusal
        raise PairkitError(f"can't reach the Ray cluster at {address}: no host before the port")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise PairkitError(f"can't reach the Ray cluster at {address}: {reason}") from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "", "false"):
            speaks = speaks_grpc(conn)
        else:  # a TLS cluster's GCS answers in TLS: left to Ray
            speaks = True
    if not speaks:  # Ray's connect to it retried for ~14 minutes too
        raise PairkitError(
            f"can't reach the Ray cluster at {address}: it answers, but not as a Ray cluster "
            "(no gRPC); give the head's GCS port (ray start --head --port, 6379 by default), "
            "not the dashboard's (8265)")


def speaks_grpc(conn: Any) -> bool:
    """Whether the server on the connected socket ``conn`` (its timeout set) is a gRPC
    server, as a Ray cluster's GCS is: HTTP/2 without TLS answers the client's connection
    preface with a SETTINGS frame (RFC 9113, 3.4); a web server answers in HTTP/1 or
    closes, a silent one times out."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    head = b""
    try:
        conn.sendall(preface)
        while len(head) < 9:  # a frame header: length (3 bytes), type, flags, stream id
            chunk = conn.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except OSError:
        return False
    return head[3] == 4  # SETTINGS


def keep_prints_off_stdout() -> None:
    """Ray's driver prints its workers' errors ("(raylet) A worker died ...") on stdout,
    where a command writes its table (``-o -``) or JSON: they go to stderr. Ray keeps no
    option for it; its printer is replaced once (left alone if Ray's layout changes)."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover - another Ray layout
        return
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "pairkit_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.pairkit_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def crash_marker() -> str | None:
    """The test hook's marker path (:data:`CRASH_ENV`), read on the driver."""
    return os.environ.get(CRASH_ENV) or None


def maybe_crash(marker: str | None) -> None:
    """Exit this worker process at once the first time ``marker`` is seen missing."""
    if not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return
    os.close(fd)
    os._exit(1)


def maybe_hold(wait_s: float = 600.0) -> None:
    """The test hooks :data:`HOLD_ENV` (wait here until killed) and :data:`WAIT_ENV`
    (wait until a worker holds a block, ``wait_s`` at most); nothing when unset."""
    import time
    from pathlib import Path

    folder = os.environ.get(HOLD_ENV)
    if folder:
        Path(folder, f"holding-{os.getpid()}").write_text(str(os.getpid()))
        while True:
            time.sleep(1)
    folder = os.environ.get(WAIT_ENV)
    deadline = time.monotonic() + wait_s
    while folder and not any(Path(folder).glob("holding-*")) and time.monotonic() < deadline:
        time.sleep(0.1)


def worker_error(exc: BaseException, what: str) -> PairkitError:
    """A worker's failure as one line: its own PairkitError as is, else what failed."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, PairkitError):
        return cause
    if isinstance(cause, BaseException):
        exc = cause
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return PairkitError(f"{what} failed on a Ray worker: {type(exc).__name__}: {first}")
