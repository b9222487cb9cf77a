"""Handing the heap's free memory back to the system after a phase of many mid-sized
temporaries.

glibc serves allocations below its mmap threshold (which grows to 32 MB once a larger
block has been freed) from the heap, and freed heap memory stays in the process's resident
set until the top of the heap is free. A phase that makes and drops many arrays of a few
MB (the false-negative context and the mined positives of ``mine``: measured 0.27 GB of
1.17 GB at 200,000 rows) leaves that much resident for the rest of the run.
``malloc_trim(0)`` returns the free pages of every arena; pyarrow's own pool is asked to
release its free memory too. Elsewhere (macOS, musl, Windows)
there is no such call and nothing is done.
"""

from __future__ import annotations

import contextlib


def return_free_memory() -> bool:
    """``malloc_trim(0)`` where the C library is glibc, and pyarrow's memory pool's free
    memory (mimalloc or jemalloc keep what arrow freed: 0.3 GB after dictionary-encoding
    4M strings) when pyarrow is loaded; True when malloc_trim released anything."""
    import ctypes
    import ctypes.util
    import sys

    if "pyarrow" in sys.modules:
        with contextlib.suppress(AttributeError):
            sys.modules["pyarrow"].default_memory_pool().release_unused()

    with contextlib.suppress(OSError, AttributeError, TypeError):
        name = ctypes.util.find_library("c")
        if name is None:
            return False
        trim = ctypes.CDLL(name).malloc_trim
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
        return bool(trim(0))
    return False
