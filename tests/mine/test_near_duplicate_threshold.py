"""The calibrated threshold of the pixel check: hand-computed cases of
:func:`choose_threshold`, and a generated store whose different images look alike (sharp
shapes at 24 px, where the copies' edits cost more than the look-alikes' differences):
the 1st percentile of the copies alone grouped most of that store (97 pairs, 4 true)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from pairkit.mine.near_duplicate_check import PixelCheck
from pairkit.mine.near_duplicate_copies import EDITS, edited_copy
from pairkit.mine.near_duplicate_threshold import choose_threshold

# 100 copy scores 0.900, 0.901, ..., 0.999: quantile(q) = 0.9 + 0.099 q; median 0.9495
COPIES = 0.9 + 0.001 * np.arange(100)


def store(lookalikes: int = 0) -> np.ndarray:
    """200 images' best scores: 20 with a duplicate scoring like the copies (0.900, 0.905,
    ..., 0.995; 10 of them at or above the median, 15 at or above the 25th percentile
    0.92475), ``lookalikes`` at 0.91, the rest 0.5."""
    nearest = np.full(200, 0.5)
    nearest[:20] = COPIES[::5]
    nearest[20: 20 + lookalikes] = 0.91
    return nearest


# the share of images with a duplicate: 10 of the 200 reach the copies' median, bounded
# above as 10 + 1.3 sqrt(10) + 1 = 15.111, over 200 x 50% of copies -> 0.151110; at the
# 25th percentile (15 + 1.3 sqrt(15) + 1) / (200 x 75%) = 0.140233 is smaller
SHARE = (10 + 1.3 * np.sqrt(10) + 1) / 100


def test_no_lookalikes_keeps_the_first_percentile() -> None:
    c = choose_threshold(COPIES, store())
    assert c.threshold == pytest.approx(0.9 + 0.099 * 0.01)
    assert not c.raised
    # at the start 19 are seen, SHARE x 0.99 x 200 = 29.92 explained
    assert c.duplicate_share == pytest.approx(SHARE)
    assert c.expected_recall == pytest.approx(0.99)
    assert c.above_copies_threshold == pytest.approx(19 / 200)


def test_lookalikes_below_the_median_raise_it_past_them() -> None:
    # + 60 look-alikes at 0.91: 79 seen at the start against 29.92 explained; below 0.91
    # the excess stays > 45, so it rises to the first quantile above 0.91 (level 0.11:
    # 0.91089), where 17 are seen and SHARE x 0.89 x 200 = 26.90 explained
    c = choose_threshold(COPIES, store(60))
    assert c.raised
    assert c.threshold == pytest.approx(0.9 + 0.099 * 0.11)
    assert c.expected_recall == pytest.approx(0.89)
    assert c.above_copies_threshold == pytest.approx(79 / 200)
    assert c.above_threshold == pytest.approx(17 / 200)


def test_pairs_two_by_two_keep_the_start() -> None:
    # the 79 images at the start in 40 pairs (twins: 40 - 79 / 2 = 0.5 <= 2): kept ...
    twins = np.full(40, 0.95)
    assert not choose_threshold(COPIES, store(60), pair_scores=twins).raised
    # ... in families (140 pairs among them): raised as without the pairs
    families = np.concatenate([twins, np.full(100, 0.91)])
    c = choose_threshold(COPIES, store(60), pair_scores=families)
    assert c.raised and c.threshold == pytest.approx(0.9 + 0.099 * 0.11)


def test_slack_and_precision() -> None:
    # 12 look-alikes (at 0.91): 31 seen, 29.92 explained, excess 1.08 <= 2 (the slack)
    assert not choose_threshold(COPIES, store(12)).raised
    # 14: 33 seen, excess 3.08 > max(2, 5% of 33) ...
    assert choose_threshold(COPIES, store(14)).raised
    # ... but within 15% of 33 = 4.95
    assert not choose_threshold(COPIES, store(14), precision=0.85).raised


def test_a_store_of_duplicates_and_an_empty_one() -> None:
    # every image has a duplicate scoring like the copies: nothing is raised
    nearest = np.random.default_rng(0).choice(COPIES, size=400)
    assert not choose_threshold(COPIES, nearest).raised
    c = choose_threshold(COPIES, np.zeros(0))
    assert not c.raised and c.duplicate_share == 0.0
    with pytest.raises(ValueError, match="at least one copy score"):
        choose_threshold(np.zeros(0), nearest)

def test_copies_at_the_threshold_count_as_found() -> None:
    """Copies scoring exactly the threshold reach it (>=): every copy of a calibration
    whose scores are all 0.9 is at the 0.9 threshold (recall 1), and two of the four
    images whose nearest score is 0.9 are above the start."""
    c = choose_threshold(np.full(10, 0.9), np.array([0.9, 0.9, 0.5, 0.1]))
    assert c.threshold == pytest.approx(0.9) and c.expected_recall == 1.0
    assert c.above_copies_threshold == 0.5 and c.above_threshold == 0.5


def lookalike_folder(root: Path, amp: float) -> tuple[list[str], set[frozenset[int]]]:
    """4 families of 10 sharp-edged shapes at 24 px (one base shape, each member with
    its own small deformation of size ``amp``), the first member of each with a planted
    copy; returns (paths, the true duplicate pairs as sets of path positions)."""
    rng = np.random.default_rng(3)
    root.mkdir(parents=True)

    def field(smooth: float) -> np.ndarray:
        x = ndimage.gaussian_filter(rng.normal(size=(24, 24)), smooth)
        return (x - x.mean()) / x.std()

    paths, truth = [], set()
    for f in range(4):
        base = field(3.0)
        for m in range(10):
            x = 1 / (1 + np.exp(-6 * (base + amp * field(2.0))))
            img = Image.fromarray((x * 255).astype(np.uint8)).convert("RGB")
            paths.append(f"f{f}-{m}.png")
            img.save(root / paths[-1])
            if m == 0:
                paths.append(f"f{f}-{m}-copy.png")
                edited_copy(img, EDITS[f], rng).save(root / paths[-1])
                truth.add(frozenset((len(paths) - 2, len(paths) - 1)))
    return paths, truth


def grouped(paths: list[str], root: Path, **options: float) -> tuple[list[frozenset], dict]:
    from pairkit.mine.near_duplicates import find_near_duplicates

    vecs = np.random.default_rng(0).normal(size=(len(paths), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    check = PixelCheck(vecs, np.array(paths, dtype=object), str(root), sample=20, **options)
    res = find_near_duplicates(vecs, check=check, keep="first")
    return [frozenset(g["id"].tolist()) for _, g in res.table.groupby("group")], res.decision


@pytest.mark.parametrize(("amp", "raised"), [(0.1, True), (0.3, False)])
def test_lookalikes_that_score_like_copies_are_not_grouped(tmp_path: Path, amp: float,
                                                           raised: bool) -> None:
    paths, truth = lookalike_folder(tmp_path / "img", amp)
    groups, d = grouped(paths, tmp_path / "img")
    pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups)
    found = sum(any(t <= g for g in groups) for t in truth)
    assert d["raised"] is raised
    assert d["threshold"] >= d["copies_threshold"]
    assert found >= 3 and pairs - found <= 1  # at most one false pair (was 93 at amp 0.1)
    if not raised:
        assert found == 4 and pairs == 4


def test_a_given_pixel_threshold_is_kept_and_the_calibration_recorded(tmp_path: Path) -> None:
    paths, _ = lookalike_folder(tmp_path / "img", 0.1)
    groups, d = grouped(paths, tmp_path / "img", threshold=0.9)
    assert d["threshold"] == 0.9 and "raised" not in d  # the summary says no "raised from"
    assert d["calibrated_threshold"] > 0.99  # what the calibration would have set
    assert sum(len(g) for g in groups) > 20  # 0.9 groups the look-alikes, as asked


def test_dedup_says_when_it_raised_the_threshold(tmp_path: Path) -> None:
    import pandas as pd
    from typer.testing import CliRunner

    from pairkit.cli.main import app
    from pairkit.core.store_writer import write_store

    paths, truth = lookalike_folder(tmp_path / "img", 0.1)
    vecs = np.random.default_rng(0).normal(size=(len(paths), 8)).astype(np.float32)
    items = pd.DataFrame({"path": paths, "source": paths, "view": 0})
    store = tmp_path / "store"
    write_store(store, vecs / np.linalg.norm(vecs, axis=1, keepdims=True), items,
                encoder={"name": "test"}, dtype="float32",
                extra={"image_root": str(tmp_path / "img")})
    r = CliRunner().invoke(app, ["dedup", str(store), "--keep", "first"])
    assert r.exit_code == 0, r.output
    line = r.stderr.strip().splitlines()[-1]
    assert "(raised from 0.9" in line and "score like copies; about" in line
    assert "of copies may be missed)" in line
    dropped = [row for row in r.stdout.splitlines() if '"keep": false' in row]
    # the copies' 1st percentile alone listed 25 of the 44 images to drop (most of the
    # families); raised: at least 3 of the 4 copies and at most a few look-alikes
    assert sum("-copy.png" in row for row in dropped) >= 3
    assert len(dropped) <= 8


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_rule_at_threshold_one_flags_identical_rows(tmp_path, dtype) -> None:
    """Found by a read-through (2026-12-06): ``dedup -t 1`` finds identical float16 rows
    (their inner product with themselves falls ~1e-3 short of 1), but the near-duplicate
    rule of ``mine`` compared with 1 as given and flagged none of them: identical rows of
    two sources were handed out as each other's hardest negatives."""
    import pandas as pd

    from pairkit.api import mine_pairs
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(3)
    base = rng.normal(size=(12, 16))
    rows = np.concatenate([base, base[:4]])  # rows 12-15 repeat rows 0-3, other sources
    labels = [f"c{i % 4}" for i in range(12)] + [f"c{(i + 1) % 4}" for i in range(4)]
    items = pd.DataFrame({"path": [f"p{i}.jpg" for i in range(16)], "label": labels})
    st = write_store(tmp_path / "s", rows.astype(np.float32), items, dtype=dtype)
    table = mine_pairs(st.root, relation="label", filter_false_negatives=True,
                       fn_rules="near-duplicate", fn_options={"near_duplicate_threshold": 1.0},
                       fn_mode="keep", positives=0, num_negatives=3, kind="flat")
    twin = {i: i + 12 for i in range(4)} | {i + 12: i for i in range(4)}
    rows_of_twins = table[table["anchor_id"].isin(list(twin))]
    hits = rows_of_twins[rows_of_twins["negative_id"] == rows_of_twins["anchor_id"].map(twin)]
    assert len(hits) == 8 and hits["false_negative"].all()
