"""pairkit/core/heap.py: the heap's free pages handed back after many mid-sized
temporaries (glibc); a no-op elsewhere."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from pairkit.core.heap import return_free_memory


def test_returns_a_bool_and_never_raises():
    assert return_free_memory() in (True, False)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_pages_are_released_on_glibc():
    kept = [np.ones(8_000) for _ in range(4_000)]  # 64 KB each: served from the heap
    del kept
    assert return_free_memory() is True
