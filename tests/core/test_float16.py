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
    torch = sys.modules.pop("torch")
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
