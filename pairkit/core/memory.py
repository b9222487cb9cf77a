"""The host memory this process can still take: what an up-front check of a large
allocation (the head's whitening) compares its need against."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PROC = Path("/proc")


def available_memory() -> int | None:
    """Bytes of host memory available now: Linux's ``MemAvailable`` (free memory and
    what the page cache can give back, without swap), lowered to the limit of the
    process's cgroup less its usage (a container's memory); elsewhere the free pages
    (``SC_AVPHYS_PAGES``). None where none of them can be read."""
    found = [n for n in (meminfo_available(), cgroup_available()) if n is not None]
    if not found:
        with contextlib.suppress(AttributeError, ValueError, OSError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return min(found) if found else None


def meminfo_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes; None without it."""
    with contextlib.suppress(OSError, ValueError):
        for line in (PROC / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def cgroup_available() -> int | None:
    """The process's cgroup memory limit less its usage, in bytes (cgroup v2, else v1);
    None without a limit or where it can't be read."""
    with contextlib.suppress(OSError, ValueError):
        inner = "/"
        for line in (PROC / "self" / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                inner = line[3:] or "/"
        for folder, limit, usage in ((CGROUP / inner.lstrip("/"), "memory.max",
                                      "memory.current"),
                                     (CGROUP / "memory", "memory.limit_in_bytes",
                                      "memory.usage_in_bytes")):
            if (folder / limit).is_file():
                text = (folder / limit).read_text().strip()
                if text == "max" or int(text) >= 1 << 60:  # no limit (v1: a huge number)
                    return None
                return max(int(text) - int((folder / usage).read_text()), 0)
    return None
