"""Handing the heap's free memory back to the system after a phase of many mid-sized
temporaries.

glibc serves allocations below its mmap threshold (which grows to 32 MB once a larger
block has been freed) from the heap, and freed heap memory stays in the process's resident
set until the top of the heap is free. A phase that makes and drops many arrays of a few
MB (the false-negative context and the mined positives of ``mine``: measured 0.27 GB of
1.17 GB at 200,000 rows) leaves that much resident for the rest of the run.
``malloc_trim(0)`` returns the free pages of every arena. Elsewhere (macOS, musl, Windows)
there is no such call and nothing is done.
"""

from __future__ import annotations

import contextlib


def return_free_memory() -> bool:
    """``malloc_trim(0)`` where the C library is glibc; True when it released anything."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        name = ctypes.util.find_library("c")
        if name is None:
            return False
        trim = ctypes.CDLL(name).malloc_trim
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
        return bool(trim(0))
    return False
