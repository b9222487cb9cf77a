"""pairkit mine --positives end to end: mined rows against a brute-force mutual-neighbour
check, on by default with the filter only, the cap, bad values, and train reading them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import random_store
from tests.mine.test_whitening import reference_whitened

runner = CliRunner()
LABEL_FREE = ["--filter-false-negatives", "--fn-rules", "near-duplicate,mutual-neighbour,cluster"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("pos") / "store", n_sources=60, views=2,
                        dim=16, classes=4)


def brute_mutual(store, m: int, whitening: float = 0.25) -> set[tuple[int, int]]:  # noqa: ANN001
    """Mutual m-nearest other-source pairs by brute force: in the reference partial
    whitening (the default), or by plain cosine with ``whitening`` 0."""
    x = store.vectors(np.float32)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if whitening > 0:
        x = reference_whitened(x, whitening)
    src = store.source_codes()
    sims = x @ x.T
    sims[src[:, None] == src[None, :]] = -np.inf
    top = np.argsort(-sims, axis=1, kind="stable")[:, :m]
    lists = [set(r.tolist()) for r in top]
    return {(i, int(j)) for i in range(len(x)) for j in top[i] if i in lists[int(j)]}


def flagged_by_rule(store, pairs: set[tuple[int, int]], m: int = 10) -> set[tuple[int, int]]:  # noqa: ANN001
    """The row pairs among ``pairs`` whose sources the mutual-neighbour rule flags: mutual
    in its (P 0.25) lists, by brute force. Plain-cosine mined positives are those."""
    src = store.source_codes()
    white = {(int(src[a]), int(src[b])) for a, b in brute_mutual(store, m, whitening=0.25)}
    return {(a, b) for a, b in pairs if (int(src[a]), int(src[b])) in white}


def test_default_with_filter_rows_are_mutual_neighbours(store, tmp_path: Path) -> None:
    out, stats = tmp_path / "p.parquet", tmp_path / "s.json"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", *LABEL_FREE, "-o", str(out),
                            "--stats", str(stats)])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    mined = df[df["positive_kind"] == "mined"]
    views = df[df["positive_kind"] == "view"]
    assert len(views) == 120 * 5 and len(mined) > 0
    assert (mined["negative_id"] == -1).all() and mined["negative_path"].isna().all()
    assert set(mined["positive_reason"]) <= {"mutual_neighbour", "near_duplicate"}
    got = set(zip(mined["anchor_id"], mined["positive_id"], strict=True))
    want = brute_mutual(store, 10)
    assert got == want  # 10 per anchor at most: no anchor here has more mutual ones
    assert mined.groupby("anchor_id").size().max() <= 10
    assert mined["positive_confidence"].between(0, 1).all()
    assert views["positive_confidence"].isna().all()
    s = json.loads(stats.read_text())["mined_positives"]
    assert s["rows"] == len(mined) and s["neighbours"] == 10
    labels = store.labels()
    precision = np.mean(labels[mined["anchor_id"]] == labels[mined["positive_id"]])
    assert s["same_label"] == pytest.approx(precision, abs=1e-4)
    # rows stay grouped by anchor: each anchor's view rows, then its mined rows
    first = df.groupby("anchor_id", sort=False).head(1).index.to_numpy()
    assert (np.diff(df["anchor_id"].to_numpy()[first]) > 0).all()


def test_naive_has_none_and_explicit_cap_works(store, tmp_path: Path) -> None:
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-o", str(tmp_path / "n.csv")])
    assert r.exit_code == 0, r.output
    assert "positive_kind" not in pd.read_csv(tmp_path / "n.csv").columns
    r = runner.invoke(app, ["mine", str(store.root), "--hard", *LABEL_FREE, "--positives", "2",
                            "-o", str(tmp_path / "c.parquet")])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "c.parquet")
    mined = df[df["positive_kind"] == "mined"]
    assert 0 < mined.groupby("anchor_id").size().max() <= 2
    assert set(zip(mined["anchor_id"], mined["positive_id"], strict=True)) <= brute_mutual(
        store, 10)


@pytest.mark.parametrize("args, message", [
    (["--positives", "-1"], "--positives must be >= 0, got -1"),
    (["--positive-neighbours", "0"], "--positive-neighbours must be >= 1, got 0"),
    (["--positive-whitening", "0.7"], "--positive-whitening must be in [0, 0.5], got 0.7"),
    (["--positive-whitening", "nan"], "--positive-whitening must be a number, got nan"),
])
def test_bad_values(store, tmp_path: Path, args: list[str], message: str) -> None:
    r = runner.invoke(app, ["mine", str(store.root), "--hard", *args,
                            "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and message in r.output


def test_train_reads_mined_positives(store, tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", *LABEL_FREE, "-o", str(out)])
    assert r.exit_code == 0, r.output
    n_mined = int((pd.read_parquet(out)["positive_kind"] == "mined").sum())
    r = runner.invoke(app, ["train", str(store.root), "--pairs", str(out), "-o",
                            str(tmp_path / "h"), "--epochs", "1", "--batch-size", "32",
                            "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert f"{n_mined} mined positives" in r.output
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["pairs"]["mined_positives"] == n_mined
    assert config["head"] == {"kind": "residual", "in_dim": 16, "out_dim": 16, "hidden": 512}
    assert config["training"]["mined_view"] == "random"
    # --mined-view row: the row mine named, another run (other positives, other weights)
    r = runner.invoke(app, ["train", str(store.root), "--pairs", str(out), "-o",
                            str(tmp_path / "row"), "--epochs", "1", "--batch-size", "32",
                            "--device", "cpu", "--mined-view", "row"])
    assert r.exit_code == 0, r.output
    config = json.loads((tmp_path / "row" / "config.json").read_text())
    assert config["training"]["mined_view"] == "row"
    assert config["fingerprint"]["mined_view"] == "row"
    weights = [(tmp_path / h / "head.safetensors").read_bytes() for h in ("h", "row")]
    assert weights[0] != weights[1]
    r = runner.invoke(app, ["train", str(store.root), "--pairs", str(out), "-o",
                            str(tmp_path / "bad"), "--mined-view", "any"])
    assert r.exit_code == 2 and "--mined-view" in r.output


def test_plain_cosine_when_whitening_is_off(store, tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", *LABEL_FREE, "--positives", "10",
                            "--positive-whitening", "0", "-o", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    mined = df[df["positive_kind"] == "mined"]
    assert set(zip(mined["anchor_id"], mined["positive_id"], strict=True)) == flagged_by_rule(
        store, brute_mutual(store, 10, whitening=0))
    # the table's score is the plain cosine whatever space the neighbours came from
    x = store.vectors(np.float32)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = np.einsum("nd,nd->n", x[mined["anchor_id"]], x[mined["positive_id"]])
    np.testing.assert_allclose(mined["pos_score"], want, atol=1e-4)


def test_reduced_search_finds_the_exact_mutual_pairs(tmp_path: Path) -> None:
    """Candidates from a search in fewer dims, re-scored in all: on 384-d vectors with a
    decaying spectrum, as real embeddings have, both the whitened lists (candidates from
    the first 128 whitened components) and the plain-cosine ones with the cluster rule on
    (its 128 principal components) give nearly the exact search's mutual pairs."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(3)
    n_src, d = 150, 384
    scale = 1.0 / np.arange(1, d + 1) ** 0.8
    centers = rng.normal(size=(6, d)) * scale
    base = centers[np.arange(n_src) % 6] + 0.6 * rng.normal(size=(n_src, d)) * scale
    rows = np.repeat(base, 2, axis=0) + 0.1 * rng.normal(size=(2 * n_src, d)) * scale
    items = pd.DataFrame({"path": [f"s{i // 2}.png" for i in range(2 * n_src)],
                          "source": [f"s{i // 2}.png" for i in range(2 * n_src)],
                          "view": [i % 2 for i in range(2 * n_src)]})
    st = write_store(tmp_path / "s", rows.astype(np.float32), items, encoder={"name": "x"},
                     dtype="float32")
    runs = {"white": LABEL_FREE, "cosine": [*LABEL_FREE, "--positive-whitening", "0"]}
    for name, args in runs.items():
        r = runner.invoke(app, ["mine", str(st.root), "--hard", *args,
                                "-o", str(tmp_path / f"{name}.parquet")])
        assert r.exit_code == 0, r.output

    def pairs(path: Path) -> set[tuple[int, int]]:
        df = pd.read_parquet(path)
        df = df[df["positive_kind"] == "mined"]
        return set(zip(df["anchor_id"], df["positive_id"], strict=True))

    for name, power in (("white", 0.25), ("cosine", 0.0)):
        want, got = brute_mutual(st, 10, whitening=power), pairs(tmp_path / f"{name}.parquet")
        if power == 0:  # those the rule flags (from its whitened lists)
            want = flagged_by_rule(st, want)
        assert len(want) > 100
        assert len(want & got) >= 0.9 * len(want) and len(want & got) >= 0.9 * len(got)


def overlap(df: pd.DataFrame) -> int:
    """Pairs (anchor, row) that are both a negative (not flagged) and a mined positive."""
    neg = df[df["positive_kind"] != "mined"]
    if "false_negative" in neg.columns:
        neg = neg[~neg["false_negative"].astype(bool)]
    mined = df[df["positive_kind"] == "mined"]
    a = set(zip(neg["anchor_id"], neg["negative_id"], strict=True))
    return len(a & set(zip(mined["anchor_id"], mined["positive_id"], strict=True)))


@pytest.mark.parametrize("args", [
    ["--hard", "--positives", "3"],
    ["--positives", "3"],
    ["--hard", "--filter-false-negatives", "--fn-rules", "near-duplicate,cluster",
     "--positives", "3"],
])
def test_mined_positives_need_the_rule_that_keeps_them_out_of_the_negatives(
        store, tmp_path: Path, args: list[str]) -> None:
    """Without the mutual-neighbour rule nothing keeps a mined positive (a mutual
    neighbour) out of the negatives: hard mining without it handed 1,168 of 2,000
    negatives out as mined positives of the same anchor. Asked for: refused; by default
    such a run mines none."""
    r = runner.invoke(app, ["mine", str(store.root), *args, "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2
    assert "mutual-neighbour" in r.output and "--positives 0" in r.output
    r = runner.invoke(app, ["mine", str(store.root), *[a for a in args if a != "3"
                                                        and a != "--positives"],
                            "-o", str(tmp_path / "d.parquet")])
    assert r.exit_code == 0, r.output
    assert "positive_kind" not in pd.read_parquet(tmp_path / "d.parquet").columns


def test_trusted_labels_drop_the_mined_positives_they_contradict(store, tmp_path: Path) -> None:
    """With the label rule (the default rules on a labelled store) a labelled pair is
    judged by its labels, not by the similarity rules: a mutual neighbour of another label
    was both the anchor's mined positive and its negative. Now no mined positive has
    another label than its anchor, and none is one of the anchor's negatives."""
    out = tmp_path / "p.parquet"
    stats = tmp_path / "s.json"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "--filter-false-negatives",
                            "-o", str(out), "--stats", str(stats)])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    mined = df[df["positive_kind"] == "mined"]
    labels = store.labels()
    assert len(mined) and (labels[mined["anchor_id"]] == labels[mined["positive_id"]]).all()
    assert overlap(df) == 0
    s = json.loads(stats.read_text())["mined_positives"]
    assert s["rows"] == len(mined) and s["same_label"] == 1.0
    # the label-free run on the same store keeps them (and flags them, so no overlap)
    free = brute_mutual(store, 10)
    other = {(a, b) for a, b in free if labels[a] != labels[b]}
    assert other and s["dropped_other_label"] > 0
    r = runner.invoke(app, ["mine", str(store.root), "--hard", *LABEL_FREE,
                            "-o", str(tmp_path / "f.parquet")])
    assert r.exit_code == 0 and overlap(pd.read_parquet(tmp_path / "f.parquet")) == 0


def test_near_duplicate_mates_do_not_depend_on_the_search(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): when the search skips rows (the cluster rule's
    or the label rule's skip) the store-wide near-duplicate groups are not built, and the
    mined positives kept only the *mutual* neighbours above the threshold: in a group
    larger than the neighbour lists (ties fill them) most anchors lost their mates, so
    ``--hard`` handed out fewer mined positives than easy negatives did."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(0)
    base = rng.normal(size=(3, 16))
    x = np.repeat(base, 30, axis=0) + 1e-4 * rng.normal(size=(90, 16))
    items = pd.DataFrame({"path": [f"s{i}_{v}.png" for i in range(45) for v in range(2)],
                          "source": [f"s{i}" for i in range(45) for v in range(2)],
                          "view": [v for i in range(45) for v in range(2)]})
    write_store(tmp_path / "s", x.astype(np.float32), items, encoder={"name": "random"})
    counts = {}
    for mode in (["--hard"], []):
        out = tmp_path / f"p{len(mode)}.parquet"
        r = runner.invoke(app, ["mine", str(tmp_path / "s"), *mode, "-k", "1", *LABEL_FREE,
                                "-o", str(out)])
        assert r.exit_code == 0, r.output
        df = pd.read_parquet(out)
        mined = df[df["positive_kind"] == "mined"]
        assert (mined["anchor_id"] // 30 == mined["positive_id"] // 30).all()
        counts[len(mode)] = mined.groupby("anchor_id").size()
    assert len(counts[1]) == len(counts[0]) == 90
    assert (counts[1] == 10).all() and (counts[0] == 10).all()


@pytest.mark.parametrize("suffix", ["csv", "parquet"])  # in memory, and streamed in blocks
def test_label_shares_say_what_they_are_over_on_a_partly_labelled_store(
        store, tmp_path: Path, suffix: str) -> None:
    """Found by a bug hunt (hunt-q 7): on a store with labels on some rows the "sharing
    their anchor's label" shares count the pairs with both labels known only, and said
    nothing of it. Counted by hand from the table here."""
    from pairkit.core.store_writer import write_store

    items = store.items.copy()
    items.loc[items.index % 4 >= 1, "label"] = None
    part = write_store(tmp_path / "part", store.vectors(np.float32), items)
    out, stats = tmp_path / f"p.{suffix}", tmp_path / "s.json"
    r = runner.invoke(app, ["mine", str(part.root), "--hard", "-k", "4", *LABEL_FREE,
                            "-o", str(out), "--stats", str(stats)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out) if suffix == "csv" else pd.read_parquet(out)
    lab = pd.factorize(items["label"])[0]  # -1: no label
    negs = df[df["negative_id"] >= 0]
    a, n = lab[negs["anchor_id"]], lab[negs["negative_id"]]
    both = (a >= 0) & (n >= 0)
    same = int(((a == n) & both).sum())
    assert 0 < both.sum() < len(negs)
    s = json.loads(stats.read_text())
    assert s["negatives_labelled"] == both.sum() and s["negatives"] == len(negs)
    assert s["negatives_same_label"] == round(same / both.sum(), 4)
    assert (f"negatives sharing their anchor's label: {same / both.sum():.1%} of the "
            f"{both.sum():,} negatives with both labels known") in r.output
    mined = df[df["positive_kind"] == "mined"]
    a, p = lab[mined["anchor_id"]], lab[mined["positive_id"]]
    both = (a >= 0) & (p >= 0)
    same = int(((a == p) & both).sum())
    assert 0 < both.sum() < len(mined)
    assert s["mined_positives"]["labelled"] == both.sum()
    assert (f"sharing their anchor's label: {same / both.sum():.1%} of the {both.sum():,} "
            "with both labels known") in r.output
    # every row labelled: the text as before
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-k", "4", *LABEL_FREE,
                            "-o", str(tmp_path / f"q.{suffix}")])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("negatives sharing"))
    assert line.endswith("%")
    line = next(x for x in r.output.splitlines() if x.startswith("mined positives"))
    assert "sharing their anchor's label: " in line and "labels known" not in line


def noise_store(path: Path, n_src: int, dim: int, seed: int):
    """``n_src`` sources of two views of pure noise (no structure at all)."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(seed)
    items = pd.DataFrame({"path": [f"p{i // 2}.png" for i in range(2 * n_src)],
                          "source": [f"s{i // 2}" for i in range(2 * n_src)],
                          "view": [i % 2 for i in range(2 * n_src)]})
    return write_store(path, rng.normal(size=(2 * n_src, dim)).astype(np.float32), items,
                       encoder={"name": "x"}, dtype="float32")


def guard_share(store, m: int, seed: int = 0) -> float:
    """The share of the guard's random pair sample (the cluster rule's: fixed, seeded)
    whose sources have a mutual row pair (brute force, the whitened lists of depth m)."""
    from pairkit.mine.rules.cluster import random_pairs

    src = store.source_codes()
    mutual = {(src[a], src[b]) for a, b in brute_mutual(store, m)}
    a, b = random_pairs(store.count, src, seed=seed)
    return float(np.mean([(src[i], src[j]) in mutual for i, j in zip(a, b, strict=True)]))


@pytest.mark.parametrize("suffix", ["csv", "parquet"])  # in memory, and in blocks
def test_mutual_rule_is_off_where_it_would_flag_most_random_pairs(tmp_path: Path,
                                                                  suffix: str) -> None:
    """Found by a bug hunt (hunt-q 4): on 20 sources of noise, each among the other's 10
    nearest of ~19, the mutual-neighbour rule flagged 77% of random pairs and handed out
    8.9 mined positives per anchor. Like the cluster rule it now measures the share of a
    fixed sample of random pairs it would flag, and above 50% flags nothing and mines no
    positive, in one line."""
    st = noise_store(tmp_path / "s20", 20, 16, seed=21)
    share = guard_share(st, 10)
    assert share > 0.5  # by brute force: most random pairs are mutual neighbours here
    out, stats = tmp_path / f"p.{suffix}", tmp_path / "s.json"
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "3",
                            "--filter-false-negatives", "-o", str(out), "--stats", str(stats)])
    assert r.exit_code == 0, r.output
    s = json.loads(stats.read_text())
    assert s["mutual"]["random_pair_share"] == pytest.approx(share, abs=1e-4)
    assert not s["fn_flagged"].get("mutual_neighbour")
    assert "mutual_neighbour" not in s["mined_positives"]["reasons"]
    df = pd.read_csv(out) if suffix == "csv" else pd.read_parquet(out)
    assert not (df["positive_kind"] == "mined").any()
    line = next(x for x in r.output.splitlines() if x.startswith("mutual-neighbour rule"))
    assert line == ("mutual-neighbour rule: off: it would flag "
                    f"{s['mutual']['random_pair_share']:.0%} of random pairs (> 50%): it "
                    "flags nothing and mines no positives")


def test_positive_neighbours_are_cut_to_the_sources_less_one(tmp_path: Path) -> None:
    """hunt-q 4: --positive-neighbours 1000 on 200 sources: cut to 199, said; the rule then
    puts every pair of sources together and is off."""
    st = noise_store(tmp_path / "s", 200, 8, seed=9)
    out, stats = tmp_path / "p.csv", tmp_path / "s.json"
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "3",
                            "--filter-false-negatives", "--positive-neighbours", "1000",
                            "-o", str(out), "--stats", str(stats)])
    assert r.exit_code == 0, r.output
    s = json.loads(stats.read_text())
    assert s["mutual"]["neighbours"] == {"asked": 1000, "used": 199}
    assert s["mined_positives"]["neighbours"] == 199
    assert s["mutual"]["random_pair_share"] > 0.5 and "off" in s["mutual"]
    line = next(x for x in r.output.splitlines() if x.startswith("mutual-neighbour rule"))
    assert line.startswith("mutual-neighbour rule: --positive-neighbours 1000 cut to 199 "
                           "(the store has 200 sources); off: it would flag ")
    assert s["negatives_per_anchor"]["min"] > 0  # the rule no longer eliminates them all


def test_the_guard_leaves_a_real_size_store_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """hunt-q 4: on a clustered store of 3,000 rows (1,500 sources, 2 views, 20 classes)
    the default label-free table is the same with the guard and without it (its share
    is far below 0.5 there, so it never acts)."""
    from pairkit.mine.rules import mutual

    st = random_store(tmp_path / "big", n_sources=1500, views=2, dim=16, classes=20)
    args = ["mine", str(st.root), "--hard", *LABEL_FREE]
    r = runner.invoke(app, [*args, "-o", str(tmp_path / "a.parquet"), "--stats",
                            str(tmp_path / "a.json")])
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "a.json").read_text())
    assert s["mutual"]["random_pair_share"] < 0.05 and "off" not in s["mutual"]
    assert "mutual-neighbour rule" not in r.output
    assert s["mined_positives"]["reasons"].get("mutual_neighbour", 0) > 1000
    monkeypatch.setattr(mutual, "MAX_SHARE", 1.0)  # a guard that never acts
    r = runner.invoke(app, [*args, "-o", str(tmp_path / "b.parquet")])
    assert r.exit_code == 0, r.output
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a.parquet"),
                                  pd.read_parquet(tmp_path / "b.parquet"))


def test_plain_cosine_positives_are_never_negatives_of_their_anchor(tmp_path: Path) -> None:
    """hunt-w F3: with --positive-whitening 0 the mined positives come from plain-cosine
    lists, the mutual-neighbour rule's flags from its own (P 0.25) lists: a pair mutual
    in the first and not the second was handed out as a mined positive and kept as a hard
    negative of the same anchor (44 of 584 mined pairs on an anisotropic store). Now a
    mined positive is one the rule flags: none is a negative, and they are the
    brute-force plain-cosine mutual pairs whose sources are mutual in the rule's space."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(1)
    n_src, d = 40, 6
    centres = rng.normal(size=(4, d))
    base = centres[rng.integers(0, 4, n_src)] + 0.6 * rng.normal(size=(n_src, d))
    rows = (np.repeat(base, 2, axis=0) + 0.3 * rng.normal(size=(2 * n_src, d))) \
        * np.linspace(0.3, 3, d)  # anisotropic: the whitening moves the neighbours
    items = pd.DataFrame({"path": [f"s{i // 2}.png" for i in range(2 * n_src)],
                          "source": [f"s{i // 2}.png" for i in range(2 * n_src)],
                          "view": [i % 2 for i in range(2 * n_src)]})
    st = write_store(tmp_path / "s", rows.astype(np.float32), items, encoder={"name": "x"},
                     dtype="float32")
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "8",
                            "--filter-false-negatives", "--fn-rules", "mutual-neighbour",
                            "--positive-whitening", "0", "-o", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    assert overlap(df) == 0
    want = flagged_by_rule(st, brute_mutual(st, 10, whitening=0))
    mined = df[df["positive_kind"] == "mined"]
    got = set(zip(mined["anchor_id"], mined["positive_id"], strict=True))
    assert got == want and len(want) < len(brute_mutual(st, 10, whitening=0))


def test_confidence_by_rank_when_the_cluster_guard_turns_the_rule_off(tmp_path: Path) -> None:
    """hunt-w F1: the mined positives took their confidence from the cluster rule's runs
    even where its guard had found no class structure (the rule flagging nothing): 610 of
    612 at 1.0 on this store, so --positive-sampling confidence drew uniformly. With the
    rule off its runs are not used: the confidences are those of a run without the rule
    (1 - rank / 10). The same where only the runs are off (two clusters that fail the
    guard; the diffusion threshold flags alone)."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(11)
    n_src, d = 40, 5
    centres = rng.normal(size=(4, d)) * 1.5
    base = centres[rng.integers(0, 4, n_src)] + 0.5 * rng.normal(size=(n_src, d))
    rows = np.repeat(base, 2, axis=0) + 0.2 * rng.normal(size=(2 * n_src, d))
    items = pd.DataFrame({"path": [f"s{i // 2}.png" for i in range(2 * n_src)],
                          "source": [f"s{i // 2}.png" for i in range(2 * n_src)],
                          "view": [i % 2 for i in range(2 * n_src)]})
    st = write_store(tmp_path / "s", rows.astype(np.float32), items, encoder={"name": "x"},
                     dtype="float32")
    got = {}
    for rules in ("mutual-neighbour,cluster", "mutual-neighbour"):
        out, stats = tmp_path / f"{rules}.parquet", tmp_path / f"{rules}.json"
        r = runner.invoke(app, ["mine", str(st.root), "--hard", "-k", "3",
                                "--filter-false-negatives", "--fn-rules", rules, "-o", str(out),
                                "--stats", str(stats)])
        assert r.exit_code == 0, r.output
        df = pd.read_parquet(out)
        got[rules] = df[df["positive_kind"] == "mined"][
            ["anchor_id", "positive_id", "positive_confidence"]].reset_index(drop=True)
        if "cluster" in rules:  # off, or its two clusters' runs (the threshold alone)
            assert {"off", "cut_off"} & json.loads(stats.read_text())["clusters"].keys()
    pd.testing.assert_frame_equal(got["mutual-neighbour,cluster"], got["mutual-neighbour"])
    assert got["mutual-neighbour"]["positive_confidence"].nunique() > 2


def test_the_whitening_is_fitted_once_for_the_lists_and_the_cluster_graph(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutual-neighbour lists' whitening and the cluster rule's graph share one fit
    of the principal components (pairkit.mine.view_whitening); the rule alone fits it."""
    import pairkit.mine.view_whitening as view_whitening
    import pairkit.mine.whitening as whitening

    wide = random_store(tmp_path / "wide", n_sources=150, views=2, dim=160, classes=4)
    fits: list[object] = []
    given: list[object] = []
    real_fit, real_rows = whitening.fit_whitening, view_whitening.view_whitened_rows

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        fits.append(real_fit(*args, **kwargs))
        return fits[-1]

    def rows_spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        given.append(kwargs.get("principal"))
        return real_rows(*args, **kwargs)

    monkeypatch.setattr(whitening, "fit_whitening", counted)
    monkeypatch.setattr(view_whitening, "fit_whitening", counted)
    monkeypatch.setattr(view_whitening, "view_whitened_rows", rows_spy)
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["mine", str(wide.root), "--hard", *LABEL_FREE, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert len(fits) == 1 and len(given) == 1 and given[0] is fits[0]
    fits.clear()
    given.clear()
    r = runner.invoke(app, ["mine", str(wide.root), "--hard", "--filter-false-negatives",
                            "--fn-rules", "cluster", "-o", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert len(fits) == 1 and given == [None]  # fitted by the graph itself
