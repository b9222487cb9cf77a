"""Splitting by source and checking --against stores."""

from __future__ import annotations

import numpy as np
import pytest

from pairkit.errors import PairkitError, UsageError
from pairkit.eval.split import check_compatible, split_by_source


def test_views_of_a_source_never_cross() -> None:
    codes = np.repeat(np.arange(50), 3)
    mask = split_by_source(codes, 0.2, seed=4)
    assert len(np.unique(codes[mask])) == 10
    assert not set(codes[mask]) & set(codes[~mask])
    np.testing.assert_array_equal(mask, split_by_source(codes, 0.2, seed=4))
    assert not np.array_equal(mask, split_by_source(codes, 0.2, seed=5))


def test_bad_splits() -> None:
    with pytest.raises(UsageError, match="--test-fraction must be > 0 and < 1, got 1.0"):
        split_by_source(np.arange(5), 1.0, 0)
    with pytest.raises(PairkitError, match="at least 2 sources"):
        split_by_source(np.zeros(4, dtype=np.int64), 0.5, 0)
    assert split_by_source(np.arange(2), 0.01, 0).sum() == 1


def test_held_out_sources_are_rounded_and_kept_between_one_and_all_but_one() -> None:
    """round(fraction x sources), at least 1 and at most all but one: a high fraction
    never leaves the references (or train's training part) empty."""
    codes = np.repeat(np.array([7, 3, 9]), 2)  # 3 sources, 2 views each
    for fraction, held in ((0.99, 2), (0.9, 2), (0.5, 2), (0.4, 1), (0.01, 1)):
        mask = split_by_source(codes, fraction, seed=1)
        assert len(np.unique(codes[mask])) == held, fraction
        assert mask.sum() == 2 * held
    assert split_by_source(np.arange(2), 0.99, 0).sum() == 1


def test_a_zero_fraction_is_refused_unless_allowed() -> None:
    with pytest.raises(UsageError, match="--test-fraction must be > 0 and < 1, got 0"):
        split_by_source(np.arange(5), 0.0, 0)
    with pytest.raises(UsageError, match=r"--val must be in \[0, 1\), got 1.0"):
        split_by_source(np.arange(5), 1.0, 0, option="--val", allow_zero=True)
    held = split_by_source(np.arange(5), 0.0, 0, option="--val", allow_zero=True)
    assert held.dtype == bool and held.shape == (5,) and not held.any()
    # a zero fraction holds nothing out even where a split would fail (one source)
    assert not split_by_source(np.zeros(3, dtype=np.int64), 0.0, 0, allow_zero=True).any()


def test_check_compatible() -> None:
    check_compatible(8, {"name": "a"}, 8, {"name": "a"}, "s", "t")
    with pytest.raises(PairkitError, match="has dim 4, store s has dim 8"):
        check_compatible(8, {"name": "a"}, 4, {"name": "a"}, "s", "t")
    with pytest.raises(PairkitError, match="different encoders"):
        check_compatible(8, {"name": "a"}, 8, {"name": "b"}, "s", "t")
    # imported stores: the encoder name decides, not the .npy files' names and hashes
    check_compatible(8, {"name": "vit", "imported_from": "train.npy", "sha256": "aa"},
                     8, {"name": "vit", "imported_from": "test.npy", "sha256": "bb"}, "s", "t")
    with pytest.raises(PairkitError, match="different encoders"):
        check_compatible(8, {"name": "vit", "imported_from": "a.npy", "sha256": "aa"},
                         8, {"name": "clip", "imported_from": "a.npy", "sha256": "aa"}, "s", "t")
    # embed's identity (weights, preprocessing) still has to match in full
    with pytest.raises(PairkitError, match="different encoders"):
        check_compatible(8, {"name": "openclip/ViT-B-32", "pretrained": "laion2b"}, 8,
                         {"name": "openclip/ViT-B-32", "pretrained": "none"}, "s", "t")


def test_mixed_encoders_name_the_fields_that_differ() -> None:
    """Issue 20.13: the message printed both encoder records (~800 characters)."""
    big = {"name": "openclip/ViT-B-32", "pretrained": "laion2b", "preprocess":
           {"size": 224, "mean": [0.48] * 3, "std": [0.26] * 3, "interpolation": "bicubic"},
           **{f"k{i}": i for i in range(10)}}
    other = {**big, "pretrained": "none", "preprocess": {**big["preprocess"], "size": 256}}
    with pytest.raises(PairkitError) as err:
        check_compatible(8, big, 8, other, "s", "t")
    text = str(err.value)
    assert 'pretrained "laion2b" vs "none"' in text and "preprocess {" in text
    assert "k3" not in text and len(text) < 300
