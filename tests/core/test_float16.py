"""pairkit.core.float16: float16 rows to float32, exact on either path."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.core import float16


@pytest.fixture
def through_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Convert through torch from the first value (as once IMPORT_AFTER were passed)."""
    import torch

    monkeypatch.setitem(float16.state, "torch", torch)


def every_half() -> np.ndarray:
    """All 65,536 float16 bit patterns, as a (256, 256) array."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)


def test_every_float16_value_converts_exactly_through_torch(through_torch: None) -> None:
    h = every_half()
    got = float16.to_float32(h)
    want = h.astype(np.float32)
    assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == h.shape
    nan = np.isnan(want)
    assert nan.sum() == 2 * 1023  # both signs' NaN patterns
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()  # a NaN stays a NaN (its payload bits may differ)


def test_read_only_strided_and_small_inputs(through_torch: None) -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=(300, 128)).astype(np.float16)
    h.flags.writeable = False  # a mapped shard
    for x in (h, h[::3], h[:, ::2], h[:2]):  # strided views; a block below SMALL
        got = float16.to_float32(x)
        np.testing.assert_array_equal(got, x.astype(np.float32))
        assert got.flags.c_contiguous
    f = np.ascontiguousarray(h, dtype=np.float32)
    assert float16.to_float32(f) is f  # float32 already: no copy


def test_torch_only_after_enough_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch loaded, numpy converts until IMPORT_AFTER values have gone through it;
    torch is then taken (a test process has it loaded: it is used when present)."""
    import sys

    monkeypatch.setattr(float16, "state", {"converted": 0, "torch": None})
    monkeypatch.setattr(float16, "IMPORT_AFTER", 3 * 40_000)
    import torch  # loaded first: a test process that has not imported it yet (xdist)

    sys.modules.pop("torch")
    try:
        x = np.ones((40_000, 1), np.float16)
        for _ in range(2):
            np.testing.assert_array_equal(float16.to_float32(x), 1.0)
            assert float16.state["torch"] is None
            assert "torch" not in sys.modules
    finally:
        sys.modules["torch"] = torch
    float16.to_float32(x)
    assert float16.state["torch"] is torch


def test_a_lean_process_never_imports_torch_for_conversions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After avoid_torch, numpy converts however many values go through (exactly), and
    torch is not imported; one loaded by something else is still used."""
    import sys

    monkeypatch.setattr(float16, "state", {"converted": 0, "torch": None, "lean": False})
    monkeypatch.setattr(float16, "IMPORT_AFTER", 40_000)
    import torch  # loaded first: a test process that has not imported it yet (xdist)

    sys.modules.pop("torch")
    try:
        float16.avoid_torch()
        x = np.arange(40_000, dtype=np.float16).reshape(-1, 1)
        for _ in range(3):
            np.testing.assert_array_equal(float16.to_float32(x), x.astype(np.float32))
        assert float16.state["torch"] is None and "torch" not in sys.modules
    finally:
        sys.modules["torch"] = torch
    float16.to_float32(x)
    assert float16.state["torch"] is torch  # loaded by something else: used


def test_big_float16_lists_make_the_process_lean(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_half_ivf of lists of LEAN_BYTES or more turns torch off for conversions (its
    import would cost ~0.5 GB beside them); smaller lists, or rows read again when
    scanned, leave it as it was."""
    import faiss

    from pairkit.index import half_ivf

    class Rows:  # a store's float16 rows, read block by block (as ShardRows gives them)
        def __init__(self, x: np.ndarray) -> None:
            self.x, self.shape, self.dtype = x, x.shape, x.dtype

        def __len__(self) -> int:
            return len(self.x)

        def blocks(self, n: int):  # type: ignore[no-untyped-def]
            for start in range(0, len(self.x), n):
                yield start, self.x[start:start + n]

    monkeypatch.setattr(float16, "state", {"converted": 0, "torch": None, "lean": False})
    x = np.random.default_rng(1).normal(size=(600, 8)).astype(np.float16)
    rows = Rows(x)
    quantizer = faiss.IndexFlatIP(8)
    quantizer.add(np.ascontiguousarray(x[:6], dtype=np.float32))
    monkeypatch.setattr(half_ivf, "LEAN_BYTES", 600 * 8 * 2 + 1)
    half_ivf.build_half_ivf(rows, quantizer, 2)
    assert not float16.state["lean"]
    monkeypatch.setattr(half_ivf, "LEAN_BYTES", 600 * 8 * 2)
    index = half_ivf.build_half_ivf(rows, quantizer, 2)
    assert float16.state["lean"] and index.ntotal == 600
