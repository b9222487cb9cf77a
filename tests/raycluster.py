"""A Ray cluster of two nodes on this machine for the tests: ``ray start --head`` and a
second ``ray start --address`` with its own resources and temp dir, each started with
``--block`` in its own process group, so a test can kill one node (SIGKILL to its group:
its raylet, its workers, its agents) as a machine that drops out would, and the cluster
can be stopped without ``ray stop`` (which stops every Ray process of the machine, other
users' included).

Isolated from whatever Ray the machine has: a private ``HOME`` (no ``~/.ray/auth_token``
of another cluster: with one there, a new cluster turns token auth on and its clients
fail with InvalidAuthToken), ``RAY_AUTH_MODE=disabled`` (a test cluster bound to
127.0.0.1), no inherited ``RAY_*`` settings (``RAY_ADDRESS`` ...), its own temp dirs and a
free port. The same on a fresh CI machine and on a development machine that already runs
Ray.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.proc import REPO, child_env

# how fast the head declares a node dead (Ray's defaults take about 30 s)
HEALTH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "500",
          "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
OBJECT_STORE = str(80 * 1024 * 1024)  # bytes per node: the tests put little there


def ray_executable() -> str | None:
    here = Path(sys.executable).with_name("ray")
    return str(here) if here.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(home: Path) -> dict[str, str]:
    """The environment of the nodes and of the commands run against them."""
    env = {k: v for k, v in child_env().items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **HEALTH)
    return env


@dataclass
class Node:
    """One ``ray start --block`` process, leader of its own process group."""

    proc: subprocess.Popen[bytes]
    temp_dir: Path
    log: Path

    def kill(self) -> None:
        """SIGKILL to the node's process group and to every process that names its temp
        dir (Ray's worker processes run in sessions of their own): gone at once, nothing
        cleaned up."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def processes(self) -> list[int]:
        """Live processes whose command line names this node's temp dir (Linux /proc)."""
        found = []
        mark = str(self.temp_dir).encode()
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if mark in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
        return [p for p in found if p != os.getpid()]

    def stop(self, grace_s: float = 2.0) -> None:
        """SIGTERM (``ray start --block`` stops its processes), then SIGKILL the rest.
        A short grace: a head whose worker node was killed took ~34 s to exit after
        SIGTERM (measured 2026-12-07), so a longer wait only delayed the same SIGKILL."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        self.kill()  # what is left of the group (the raylet's workers ...)


@dataclass
class LocalCluster:
    address: str
    env: dict[str, str]
    nodes: list[Node] = field(default_factory=list)

    def python(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``python -c CODE`` as a client of this cluster (its environment)."""
        return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def pairkit(self, *args: object, env: dict[str, str] | None = None
                ) -> subprocess.Popen[str]:
        """Start ``python -m pairkit ARGS`` against this cluster."""
        return subprocess.Popen([sys.executable, "-m", "pairkit", *map(str, args)],
                                cwd=REPO, env={**self.env, **(env or {})}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def start_node(env: dict[str, str], temp_dir: Path, *args: str) -> Node:
    exe = ray_executable()
    assert exe is not None
    temp_dir.mkdir(parents=True, exist_ok=True)
    log = temp_dir / "ray-start.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([exe, "start", "--block", "--node-ip-address", "127.0.0.1",
                                 "--temp-dir", str(temp_dir), "--object-store-memory",
                                 OBJECT_STORE, "--disable-usage-stats", *args],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return Node(proc, temp_dir, log)


WAIT_FOR_NODES = """
import sys, time, ray
ray.init(address="{address}", logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + {wait_s}
while time.monotonic() < deadline:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= {nodes} and ray.cluster_resources().get("CPU", 0) >= {cpus}:
        print(len(alive))
        break
    time.sleep(0.5)
else:
    sys.exit("the cluster did not come up: " + str(ray.nodes()))
"""


@contextlib.contextmanager
def two_nodes(head_env: dict[str, str] | None = None,
              worker_env: dict[str, str] | None = None,
              wait_s: float = 120.0) -> Iterator[LocalCluster]:
    """A head node (1 CPU) and a worker node (1 CPU) on this machine, ``head_env`` and
    ``worker_env`` added to their environments (which their worker processes inherit,
    the commands run against the cluster do not); stopped at the end.
    Their folders are in a new short-named temp dir (Ray's socket paths must stay under
    108 bytes), removed at the end."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="pkray-"))
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = cluster_env(home)
    port = free_port()
    address = f"127.0.0.1:{port}"
    cluster = LocalCluster(address, env)
    try:
        cluster.nodes.append(start_node({**env, **(head_env or {})}, root / "head",
                                        "--head", "--port", str(port), "--num-cpus", "1",
                                        "--include-dashboard", "false"))
        deadline = time.monotonic() + wait_s
        while True:  # the GCS port answers
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=0.5):
                break
            if cluster.nodes[0].proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ray start --head failed:\n"
                                   + cluster.nodes[0].log.read_text()[-2000:])
            time.sleep(0.2)
        cluster.nodes.append(start_node({**env, **(worker_env or {})}, root / "node",
                                        "--address", address, "--num-cpus", "1"))
        r = cluster.python(WAIT_FOR_NODES.format(address=address, wait_s=wait_s, nodes=2,
                                                 cpus=2), timeout=wait_s + 60)
        if r.returncode != 0:
            raise RuntimeError(f"the two-node cluster did not come up: {r.stderr[-2000:]}\n"
                               + cluster.nodes[-1].log.read_text()[-2000:])
        yield cluster
    finally:
        for node in reversed(cluster.nodes):
            node.stop()
        shutil.rmtree(root, ignore_errors=True)
