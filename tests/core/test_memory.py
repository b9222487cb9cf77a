"""The host memory available: /proc/meminfo and the cgroup's limit, on made-up files."""

from __future__ import annotations

import pytest

from pairkit.core import memory


@pytest.fixture
def fake(tmp_path, monkeypatch):
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "meminfo").write_text(
        "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n"
        "MemAvailable:    8000000 kB\n")
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/job/7\n")
    monkeypatch.setattr(memory, "PROC", tmp_path / "proc")
    monkeypatch.setattr(memory, "CGROUP", tmp_path / "cg")
    return tmp_path


def test_meminfo_alone(fake):
    assert memory.available_memory() == 8_000_000 * 1024


def test_a_cgroup_v2_limit_less_its_usage_lowers_it(fake):
    job = fake / "cg" / "job" / "7"
    job.mkdir(parents=True)
    (job / "memory.max").write_text("4294967296\n")
    (job / "memory.current").write_text("1073741824\n")
    assert memory.available_memory() == 3 * 2**30
    (job / "memory.max").write_text("max\n")                 # no limit: meminfo's
    assert memory.available_memory() == 8_000_000 * 1024


def test_a_cgroup_v1_limit(fake):
    v1 = fake / "cg" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("2147483648\n")
    (v1 / "memory.usage_in_bytes").write_text("3221225472\n")  # over it: nothing left
    assert memory.available_memory() == 0
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert memory.available_memory() == 8_000_000 * 1024


def test_this_machine():
    got = memory.available_memory()
    assert got is None or got > 0
