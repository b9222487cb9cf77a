"""The views' numbers on hand-made tables: long form, summaries, sampling, groups, metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pairkit.report.dedup_view import MAX_COPIES_SHOWN, build_dedup_section
from pairkit.report.eval_view import metric_rows
from pairkit.report.pairs_view import (
    MAX_NEGATIVES_SHOWN,
    build_pairs_section,
    reason_counts,
    sample_anchors,
    summarize,
    to_long,
)
from pairkit.report.summary import histogram, score_stats


def ref_table():
    """ref(id, path) that hands out ids as they are (the page's item index = id)."""
    seen: dict[int, object] = {}

    def ref(item_id, path):
        seen[int(item_id)] = path
        return int(item_id)

    return ref, seen


TRIPLET = pd.DataFrame({
    "anchor_id": [0, 0, 0, 1, 1],
    "positive_id": [5, 5, 5, 6, 6],
    "negative_id": [2, 3, 4, 0, 3],
    "anchor_path": ["a0", "a0", "a0", "a1", "a1"],
    "positive_path": ["p5", "p5", "p5", "p6", "p6"],
    "negative_path": ["n2", "n3", "n4", "a0", "n3"],
    "pos_score": [0.9, 0.9, 0.9, 0.2, 0.2],
    "neg_score": [0.8, 0.7, 0.6, 0.5, -0.3],
    "neg_rank": [0, 1, 2, 0, -1],
    "false_negative": [True, False, False, False, True],
    "fn_reason": ["label|near_duplicate", None, None, None, "kreciprocal"],
})
LABELS = np.array(["x", "y", "x", "y", "z", "x", "y"], dtype=object)


def test_triplet_summary_by_hand():
    long = to_long(TRIPLET, "triplet")
    assert len(long.positives) == 2 and len(long.negatives) == 5
    s = summarize(long, "triplet", len(TRIPLET), LABELS)
    assert (s["rows"], s["anchors"], s["positives"], s["negatives"], s["flagged"]) == (
        5, 2, 2, 5, 2)
    # free-text reasons, several per cell joined with |
    assert s["reasons"] == {"kreciprocal": 1, "label": 1, "near_duplicate": 1}
    # unflagged negatives: (0,3) y vs x, (0,4) z vs x, (1,0) x vs y -> 0 of 3 share;
    # flagged: (0,2) x vs x, (1,3) y vs y -> 2 of 2
    assert s["same_label"]["unflagged"] == {"n": 3, "same": 0, "share": 0.0}
    assert s["same_label"]["flagged"] == {"n": 2, "same": 2, "share": 1.0}
    assert s["scores"]["negative"]["median"] == pytest.approx(0.6)  # of 0.7, 0.6, 0.5
    assert s["scores"]["flagged"]["min"] == pytest.approx(-0.3)
    counts = {h["name"]: sum(h["counts"]) for h in s["hist"]["series"]}
    assert counts == {"positives": 2, "negatives": 3, "flagged negatives": 2}


def test_same_label_share_counts_only_pairs_of_known_labels():
    """A negative whose label is missing is not counted: neither in n nor in the share."""
    t = pd.DataFrame({
        "anchor_id": [0, 0, 0, 2], "positive_id": [4, 4, 4, 5], "negative_id": [1, 2, 3, 0],
        "anchor_path": ["a0"] * 3 + ["a2"], "positive_path": ["p4"] * 3 + ["p5"],
        "negative_path": ["n1", "n2", "n3", "a0"],
        "pos_score": [0.9, 0.9, 0.9, 0.8], "neg_score": [0.5, 0.4, 0.3, 0.6],
        "neg_rank": [0, 1, 2, 0], "false_negative": [False, False, False, True],
        "fn_reason": [None, None, None, "label"],
    })
    labels = np.array(["x", "x", None, "y", "x", None], dtype=object)
    s = summarize(to_long(t, "triplet"), "triplet", len(t), labels)
    # unflagged: (0,1) x x, (0,2) x ?, (0,3) x y -> 1 same of 2 known
    assert s["same_label"]["unflagged"] == {"n": 2, "same": 1, "share": 0.5}
    # flagged: (2,0) ? x -> none known
    assert s["same_label"]["flagged"] == {"n": 0, "same": 0, "share": None}


def test_anchor_blocks_order_hardest_first_attracted_last():
    ref, seen = ref_table()
    sec = build_pairs_section("t", TRIPLET, "triplet", sample=0, seed=0, labels=None, ref=ref)
    a0, a1 = sec["anchors"]
    assert a0["a"] == 0 and a0["p"] == [[5, 0.9]]
    assert [n[0] for n in a0["n"]] == [2, 3, 4]
    assert a0["n"][0][3:] == [1, "label|near_duplicate"]
    assert [n[0] for n in a1["n"]] == [0, 3] and a1["n"][1][2] == -1  # rank -1 goes last
    assert seen[5] == "p5" and seen[0] == "a0"


def test_labeled_pair_and_n_tuple_reach_the_same_long_form():
    lp = pd.DataFrame({
        "anchor_id": [0, 0, 0, 0], "other_id": [5, 2, 3, 4],
        "label": [1, 0, 0, 1], "score": [0.9, 0.8, 0.7, 0.95],
        "false_negative": [False, False, False, True], "fn_reason": [None, None, None, "label"],
    })
    long = to_long(lp, "labeled-pair")
    assert long.positives["item_id"].tolist() == [5]
    assert long.negatives["item_id"].tolist() == [2, 3, 4]
    assert long.negatives["rank"].tolist() == [0, 1, -1]  # the attracted candidate: -1
    assert long.negatives["flag"].tolist() == [False, False, True]
    nt = pd.DataFrame({
        "anchor_id": [0, 1], "positive_id": [5, 6], "pos_score": [0.9, 0.2],
        "negative_id_1": [2, 0], "negative_id_2": [3, -1],
        "neg_score_1": [0.8, 0.5], "neg_score_2": [0.7, np.nan],
        "false_negative": [True, False], "fn_reason": ["cluster", None],
    })
    long = to_long(nt, "n-tuple")
    assert long.row_flags
    neg = long.negatives.sort_values(["anchor_id", "rank"])
    assert neg["item_id"].tolist() == [2, 3, 0]  # the empty slot (-1) is dropped
    assert neg["flag"].tolist() == [True, True, False]  # the row's flag marks its negatives
    assert summarize(long, "n-tuple", 2, None)["reasons"] == {"cluster": 2}


def test_tables_without_flag_or_score_columns():
    t = TRIPLET[["anchor_id", "positive_id", "negative_id"]]
    s = summarize(to_long(t, "triplet"), "triplet", len(t), None)
    assert not s["has_flags"] and s["flagged"] == 0 and s["scores"]["negative"] == {"n": 0}
    assert s["hist"]["series"] == []


def test_sample_anchors_is_seeded_and_sized():
    n = 1000
    t = pd.DataFrame({"anchor_id": np.arange(n), "positive_id": (np.arange(n) + 1) % n,
                      "negative_id": (np.arange(n) + 2) % n})
    long = to_long(t, "triplet")
    a = sample_anchors(long, 50, seed=3)
    assert len(a) == 50 and len(set(a.tolist())) == 50 and (np.diff(a) > 0).all()
    assert (a == sample_anchors(long, 50, seed=3)).all()
    assert not (a == sample_anchors(long, 50, seed=4)).all()
    assert len(sample_anchors(long, 0, seed=3)) == n == len(sample_anchors(long, 5000, seed=3))


def test_negatives_past_the_cap_are_counted_not_shown():
    k = MAX_NEGATIVES_SHOWN + 7
    t = pd.DataFrame({"anchor_id": 0, "positive_id": 1, "negative_id": np.arange(2, 2 + k),
                      "neg_rank": np.arange(k), "neg_score": np.linspace(0.9, 0.1, k)})
    ref, _ = ref_table()
    (block,) = build_pairs_section("t", t, "triplet", sample=0, seed=0, labels=None,
                                   ref=ref)["anchors"]
    assert len(block["n"]) == MAX_NEGATIVES_SHOWN and block["more"] == 7
    assert block["n"][0][0] == 2  # rank 0 first


def test_reason_counts_treats_reasons_as_free_text():
    reasons = np.array(["label", "label| kreciprocal ", None, "||", "new rule"], dtype=object)
    assert reason_counts(reasons) == {"label": 2, "kreciprocal": 1, "new rule": 1}


def test_histogram_and_stats_by_hand():
    h = histogram({"a": np.array([-1.5, -1.0, 0.0, 0.49, 0.5, 1.0001, np.nan])}, bins=4)
    assert h["edges"] == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert h["series"][0]["counts"] == [2, 0, 2, 2]  # out-of-range values clip to the ends
    s = score_stats(np.array([1.0, 2.0, 3.0, 4.0, np.inf]))
    assert (s["n"], s["min"], s["median"], s["max"], s["mean"]) == (4, 1.0, 2.5, 4.0, 2.5)
    # skewed values: the quartiles (numpy's linear rule, by hand) and the mean apart from the median
    s = score_stats(np.array([10.0, 0.0, np.nan, 2.0, 1.0]))
    assert s == {"n": 4, "min": 0.0, "q25": 0.75, "median": 1.5, "q75": 4.0, "max": 10.0,
                 "mean": 3.25}


def test_dedup_groups_largest_first_kept_first():
    g = pd.DataFrame({
        "group": [0, 0, 1, 1, 1, 2, 2], "id": [0, 1, 2, 3, 4, 5, 6],
        "path": list("abcdefg"), "keep": [True, False, False, True, False, True, False],
        "similarity": [1.0, 0.99, 0.97, 1.0, 0.98, 1.0, 1.0],
        "match": ["keep", "near", "near", "keep", "near", "keep", "exact"],
    })
    labels = np.array(["x", "x", "x", "y", "y", "z", "z"], dtype=object)
    ref, _ = ref_table()
    sec = build_dedup_section("d", g, sample=2, labels=labels, ref=ref)
    s = sec["summary"]
    assert (s["groups"], s["members"], s["drop"], s["exact"], s["near"]) == (3, 7, 4, 1, 3)
    assert s["groups_shown"] == 2 and s["mixed_label_groups"] == 1  # group 1: x and y
    assert [grp["g"] for grp in sec["groups"]] == [1, 0]  # 3 members, then the lower number
    assert [m[0] for m in sec["groups"][0]["m"]] == [3, 2, 4]  # kept, least similar first
    assert s["sizes"] == {"2": 2, "3": 1}
    assert [(grp["n"], grp["more"], grp["x"], grp["mixed"]) for grp in sec["groups"]] == [
        (3, 0, ["near"], 1), (2, 0, ["near"], 0)]


def test_dedup_group_members_are_capped_least_similar_first():
    """A group of 500: the kept item and the MAX_COPIES_SHOWN least similar copies are
    shown (only they are looked up, so only they get thumbnails); the rest is counted;
    the filters' facts (x, mixed) and the size cover the whole group."""
    rng = np.random.default_rng(3)
    n = 500
    sim = rng.uniform(0.9, 1.0, n - 1)
    sim[10] = np.nan  # no similarity: after every number
    match = np.where(np.arange(n - 1) == 400, "exact", "near")  # an exact copy, not shown
    g = pd.DataFrame({
        "group": [7] * n + [8, 8], "id": np.arange(n + 2), "path": [f"p{i}" for i in range(n + 2)],
        "keep": [False] * 250 + [True] + [False] * (n - 251) + [True, False],
        "similarity": [*sim[:250], 1.0, *sim[250:], 1.0, 0.95],
        "match": [*match[:250], "keep", *match[250:], "keep", "near"],
    })
    labels = np.array(["a"] * (n + 2), dtype=object)
    labels[n - 1] = "b"  # the last member of group 7 (a similar copy, not shown)
    ref, seen = ref_table()
    sec = build_dedup_section("d", g, sample=0, labels=labels, ref=ref)
    big, small = sec["groups"]
    assert MAX_COPIES_SHOWN == 64
    assert (big["g"], big["n"], big["more"], len(big["m"])) == (7, 500, 499 - 64, 65)
    copies = g[(g["group"] == 7) & ~g["keep"]]
    want = copies.sort_values("similarity", kind="stable")["id"].tolist()[:64]  # NaN last
    assert big["m"][0][:2] == [250, 1] and [m[0] for m in big["m"][1:]] == want
    shown_sims = [m[2] for m in big["m"][1:]]
    assert shown_sims == sorted(shown_sims)
    assert shown_sims[-1] < float(np.nanmin(copies["similarity"].to_numpy()[
        ~copies["id"].isin(want)]))  # every hidden copy is more similar
    assert big["x"] == ["exact", "near"] and big["mixed"] == 1  # from the hidden members too
    assert (small["n"], small["more"], [m[0] for m in small["m"]]) == (2, 0, [n, n + 1])
    assert sorted(seen) == sorted([250, *want, n, n + 1])  # no other item looked up


def test_metric_rows_follow_the_terminal_table():
    raw = {"knn_top1": 0.5, "knn": {"20": {"top1": 0.5, "top5": 0.75}}, "map_at_r": 0.25,
           "recall_at_k": {"1": 0.5}, "n_queries": 8, "extra": {"deep": 1.5}}
    head = {**raw, "knn_top1": 0.625}
    rows = metric_rows({"raw": raw, "head": head})
    assert rows == [
        ["kNN top-1 (first k)", "0.5000", "0.6250"],
        ["kNN k=20 top-1 / top-5", "0.5000 / 0.7500", "0.5000 / 0.7500"],
        ["MAP@R", "0.2500", "0.2500"],
        ["recall@1", "0.5000", "0.5000"],
        ["queries", "8", "8"],
        ["extra.deep", "1.5000", "1.5000"],
    ]
    # how the probe was fitted: a small weight decay is not printed as 0.0000
    probe = {"linear_top1": 0.5, "linear_probe": {"balanced": True, "weight_decay": 1e-05,
                                                  "validated": False}, "uniformity": -2.0}
    assert metric_rows({"raw": probe})[1:] == [
        ["linear probe weight decay", "1e-05"],
        ["linear probe decay chosen by validation", "false"],
        ["linear probe balanced (every class weighs the same)", "true"],
        ["uniformity (t=2, lower is better)", "-2.0000"]]


def test_metric_rows_of_a_gallery_of_queries_in_the_terminal_order(tmp_path):
    """Found by a bug hunt (2026-12-06): n_gallery (and the probe's fit) came last, under
    raw key names, though the terminal table shows "retrieval gallery (the queries)"
    right after "references". The report's rows that the terminal table has come in its
    order, with its titles (pairkit.eval.table, the reference)."""
    import json

    from typer.testing import CliRunner

    from pairkit.cli.main import app
    from pairkit.eval.run import EvalReport
    from pairkit.eval.table import table_rows
    from pairkit.report.inputs import eval_results
    from tests.conftest import random_store

    random_store(tmp_path / "s", n_sources=40, views=1, classes=3)
    r = CliRunner().invoke(app, ["eval", str(tmp_path / "s"), "--retrieval-gallery",
                                 "queries", "--json", "-q", "--probe-max-train", "100"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert "n_gallery" in result
    report = [row[0] for row in metric_rows(eval_results(result))]
    terminal = [title for title, _ in table_rows({"raw": result}, {"raw": EvalReport()})]
    assert [t for t in report if t in terminal] == terminal
    assert report[report.index("references") + 1] == "retrieval gallery (the queries)"
    assert not [t for t in report if "." in t or "_" in t]  # no raw key names


def test_terminal_table_cells_by_hand():
    """Each k's kNN cell is that k's top-1 / top-5; recall@k and the score rows of each run
    in its own column (values made up)."""
    import numpy as np

    from pairkit.eval.run import EvalReport
    from pairkit.eval.table import table_rows

    raw = {"knn_top1": 0.5, "knn": {"1": {"top1": 0.5, "top5": 0.875},
                                    "5": {"top1": 0.25, "top5": 0.75}},
           "knn_mean_per_class_recall": 0.4, "map_at_r": 0.125,
           "recall_at_k": {"1": 0.5, "10": 1.0}}
    head = {**raw, "knn": {"1": {"top1": 0.625, "top5": 1.0}, "5": {"top1": 0.0625}},
            "map_at_r": None}
    rows = dict(table_rows({"raw": raw, "head": head},
                           {"raw": EvalReport(scores={"positive": np.array([0.5, 0.7])}),
                            "head": EvalReport()}))
    assert rows["kNN top-1 (first k)"] == ["0.5000", "0.5000"]
    assert rows["kNN k=1 top-1 / top-5"] == ["0.5000 / 0.8750", "0.6250 / 1.0000"]
    assert rows["kNN k=5 top-1 / top-5"] == ["0.2500 / 0.7500", "0.0625 / -"]
    assert rows["MAP@R"] == ["0.1250", "-"]
    assert rows["recall@10"] == ["1.0000", "1.0000"]
    assert rows["score: positive pairs, mean +- sd"] == ["0.600 +- 0.100", "-"]


def test_the_page_policy_allows_its_own_script_and_style_and_local_images_only():
    import base64
    import hashlib

    from pairkit.report.page import content_security_policy

    def sha(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    script, style = "draw();", "body { margin: 0 }"
    assert content_security_policy(script, style) == (
        f"default-src 'none'; script-src {sha(script)}; style-src {sha(style)}; "
        "img-src 'self' file:; base-uri 'none'; form-action 'none'")


def test_items_of_two_stores_and_the_store_found_beside_a_table(tmp_path):
    """Row 0 of one store is not row 0 of another (one report, two tables, two stores);
    a store beside a table is taken only when the table's ids fit it."""
    from pairkit.core.store_writer import write_store
    from pairkit.report.items import ItemTable
    from pairkit.report.stores import find_store, open_for_report

    for name in ("a", "b"):
        write_store(tmp_path / name / "store", np.eye(3, dtype=np.float32),
                    pd.DataFrame({"path": [f"{name}{i}.png" for i in range(3)],
                                  "label": [f"L{name}"] * 3}))
    items = ItemTable()
    ref_a = items.ref(open_for_report(tmp_path / "a" / "store"))
    ref_b = items.ref(open_for_report(tmp_path / "b" / "store"))
    assert [ref_a(0, None), ref_b(0, None), ref_a(0, None), ref_b(2, None)] == [0, 1, 0, 2]
    assert [(r["path"], r["label"]) for r in items.rows] == [
        ("a0.png", "La"), ("b0.png", "Lb"), ("b2.png", "Lb")]
    fits = pd.DataFrame({"anchor_id": [0, 1], "positive_id": [1, 2], "negative_id": [2, 0]})
    near = tmp_path / "a" / "pairs.csv"
    found = find_store(fits, "triplet", near)
    assert found is not None and found.store.root.resolve() == (tmp_path / "a" / "store").resolve()
    too_big = fits.assign(negative_id=[2, 7])  # row 7: not a row of a 3-row store
    assert find_store(too_big, "triplet", near) is None


def test_items_of_tables_without_a_store_are_told_apart_by_path():
    """Without a store, one id with two paths (tables of two stores) is two items."""
    from pairkit.report.items import ItemTable

    items = ItemTable()
    ref = items.ref(None)
    assert [ref(3, "a.png"), ref(3, "b.png"), ref(3, "a.png"), ref(4, None)] == [0, 1, 0, 2]
    assert [(r["id"], r["path"]) for r in items.rows] == [(3, "a.png"), (3, "b.png"),
                                                          (4, None)]


def test_dedup_groups_without_match_bad_groups_and_unlabelled_members():
    """A dedup table without ``match`` (an older pairkit's): copies are ``near``; a row
    without a group number is no group's; a group of one labelled and one unlabelled
    member is not mixed (missing labels are not counted)."""
    from pairkit.report.dedup_view import label_counts, normalize_groups

    t = pd.DataFrame({"group": [0, 0, None, 1, 1], "id": [0, 1, 2, 3, 4],
                      "keep": [True, False, True, "true", "false"],
                      "similarity": [1.0, 0.98, 1.0, 1.0, 0.97]})
    g = normalize_groups(t)
    assert g["id"].tolist() == [0, 1, 3, 4] and g["group"].tolist() == [0, 0, 1, 1]
    assert g["match"].tolist() == ["keep", "near", "keep", "near"]
    labels = np.array(["x", None, "y", "y", "z"], dtype=object)
    assert label_counts(g, labels).to_dict() == {0: 1, 1: 2}
