"""`pairkit eval` end to end: JSON keys, direct checks, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.core.store_writer import write_store

runner = CliRunner()

ALL_KEYS = {"knn_top1", "knn_top5", "knn", "knn_mean_per_class_recall", "linear_top1",
            "linear_mean_per_class_recall", "linear_probe",
            "precision_at_1", "r_precision", "map_at_r", "recall_at_k", "alignment",
            "uniformity", "n_queries", "n_references"}
FAST = ["--probe-max-train", "500"]


def noisy_store(path: Path, n_sources: int = 60, views: int = 2, dim: int = 8,
                classes: int = 4, seed: int = 0, labels: bool = True,
                encoder: str = "random", noise: float = 1.0, skew: bool = False) -> Store:
    """Overlapping clusters, so metrics are between 0 and 1. ``skew``: class 0 takes
    every source but each fifth, which class 1 takes (two classes, 4x apart)."""
    centres = np.random.default_rng(99).normal(size=(classes, dim))  # shared by all seeds
    rng = np.random.default_rng(seed)
    rows, items = [], []
    for s in range(n_sources):
        c = int(s % 5 == 0) if skew else s % classes
        base = centres[c] + noise * rng.normal(size=dim)
        for v in range(views):
            rows.append(base + 0.3 * rng.normal(size=dim))
            item = {"path": f"{seed}/s{s}_{v}.jpg", "source": f"{seed}/s{s}", "view": v}
            if labels:
                item["label"] = f"c{c}"
            items.append(item)
    return write_store(path, np.asarray(rows, dtype=np.float32), pd.DataFrame(items),
                       encoder={"name": encoder}, dtype="float32")


def _run(*args: str):
    return runner.invoke(app, ["eval", *args])


def _json(result) -> dict:
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def test_split_json_has_the_agreed_keys(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s")
    out = _json(_run(str(tmp_path / "s"), "--json", "--knn-k", "3,7", *FAST))
    assert set(out) == ALL_KEYS
    assert out["n_queries"] + out["n_references"] == 120
    assert out["n_queries"] == 24  # 12 of 60 sources, 2 views each
    assert set(out["knn"]) == {"3", "7"}
    assert out["knn_top1"] == out["knn"]["3"]["top1"]
    assert set(out["recall_at_k"]) == {"1", "5", "10"}
    assert out["linear_probe"]["balanced"] is False
    for key in ALL_KEYS - {"knn", "recall_at_k", "n_queries", "n_references", "uniformity",
                           "linear_probe"}:
        assert 0.0 <= out[key] <= 4.0, key
    table = _run(str(tmp_path / "s"), *FAST).stderr
    # the table has no title line: it starts at its top border
    assert "pairkit eval" not in table and "precision@1" in table
    assert table.splitlines()[1].startswith("┏")


def test_against_matches_a_direct_computation(tmp_path: Path) -> None:
    ref = noisy_store(tmp_path / "ref", seed=0)
    test = noisy_store(tmp_path / "test", n_sources=30, seed=1)
    out = _json(_run(str(tmp_path / "ref"), "--against", str(tmp_path / "test"), "--json",
                     "--knn-k", "5", "--metrics", "knn,retrieval"))
    r, q = ref.vectors(np.float32).astype(np.float64), test.vectors(np.float32).astype(np.float64)
    rl, ql = ref.labels(), test.labels()
    sims = q @ r.T
    top1 = p1 = 0
    right: dict[str, list[bool]] = {}
    for i in range(len(q)):
        nn = np.argsort(-sims[i])[:5]
        votes: dict[str, float] = {}
        for j in nn:
            votes[rl[j]] = votes.get(rl[j], 0.0) + np.exp(sims[i, j] / 0.07)
        hit = max(sorted(votes), key=lambda c: votes[c]) == ql[i]
        top1 += hit
        right.setdefault(ql[i], []).append(hit)
        p1 += rl[nn[0]] == ql[i]
    assert out["knn_top1"] == pytest.approx(top1 / len(q))
    assert out["knn_mean_per_class_recall"] == pytest.approx(
        np.mean([np.mean(hits) for hits in right.values()]))
    assert out["precision_at_1"] == pytest.approx(p1 / len(q))
    assert set(out) == {"knn_top1", "knn_top5", "knn", "knn_mean_per_class_recall",
                        "precision_at_1", "r_precision", "map_at_r", "recall_at_k",
                        "n_queries", "n_references"}
    assert 0.2 < out["knn_top1"] < 1.0


def test_against_itself_excludes_the_query(tmp_path: Path) -> None:
    s = noisy_store(tmp_path / "s", views=1)
    out = _json(_run(str(tmp_path / "s"), "--against", str(tmp_path / "s"), "--json",
                     "--metrics", "retrieval", "--include-same-source"))
    x = s.vectors(np.float32)
    labels = s.labels()
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    p1 = np.mean([labels[np.argmax(sims[i])] == labels[i] for i in range(len(x))])
    assert out["precision_at_1"] == pytest.approx(p1)
    assert out["precision_at_1"] < 1.0


def test_gallery_of_queries(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s")
    out = _json(_run(str(tmp_path / "s"), "--json", "--metrics", "retrieval",
                     "--retrieval-gallery", "queries", "--recall-k", "1,2"))
    assert set(out["recall_at_k"]) == {"1", "2"}
    assert 0.0 < out["map_at_r"] <= 1.0


def test_no_labels_gives_label_free_metrics(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s", labels=False)
    res = _run(str(tmp_path / "s"), "--json")
    out = _json(res)
    assert set(out) == {"alignment", "uniformity", "n_queries", "n_references"}
    assert "need labels" in res.stderr and "only label-free metrics" in res.stderr
    res = _run(str(tmp_path / "s"), "--metrics", "knn")
    assert res.exit_code == 1
    assert res.stderr.strip() == "error: --metrics knn need labels, the queries have none"


def test_one_view_has_no_alignment(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s", views=1, labels=False)
    res = _run(str(tmp_path / "s"), "--json")
    assert set(_json(res)) == {"uniformity", "n_queries", "n_references"}
    assert "alignment needs 2+ views" in res.stderr


def test_one_class(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s", classes=1)
    res = _run(str(tmp_path / "s"), "--json")
    assert set(_json(res)) == {"alignment", "uniformity", "n_queries", "n_references"}
    assert "need at least 2 classes on the reference side, found 1 (c0)" in res.stderr
    res = _run(str(tmp_path / "s"), "--metrics", "linear")
    assert res.exit_code == 1
    assert "at least 2 classes" in res.stderr and "Traceback" not in res.stderr


def test_bad_input_messages(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s")
    noisy_store(tmp_path / "d4", dim=4)
    noisy_store(tmp_path / "enc", encoder="other")
    s = str(tmp_path / "s")
    cases = [
        (["--against", str(tmp_path / "d4")], 1, "has dim 4, store"),
        (["--against", str(tmp_path / "enc")], 1, "different encoders are not comparable"),
        (["--knn-k", "500"], 1, "--knn-k 500 is larger than the reference set (96 items)"),
        (["--recall-k", "1,500", "--metrics", "retrieval"], 1, "--recall-k 500 is larger"),
        (["--knn-k", "a"], 2, "--knn-k must be a comma-separated list of integers"),
        (["--knn-temperature", "0"], 2, "--knn-temperature must be > 0, got 0.0"),
        (["--compare"], 2, "--compare needs --head"),
        (["--against", s, "--test-fraction", "0.1"], 2, "exclude each other"),
        (["--test-fraction", "1.5"], 2, "--test-fraction must be > 0 and < 1, got 1.5"),
        (["--metrics", "knn,foo"], 2, "--metrics must be a comma list of knn, linear, "
         "retrieval, geometry, got 'foo'"),
        (["--metrics", "foo"], 2, "got 'foo'"),
        # found by a bug hunt (2026-12-07): accepted, as --knn-k 5,5 and --map pca,pca are not
        (["--metrics", "knn,knn"], 2, "error: --metrics lists knn twice\n"),
        (["--metrics", "geometry,knn,geometry"], 2, "error: --metrics lists geometry twice\n"),
        (["--retrieval-gallery", "all"], 2, "'all' is not one of 'reference', 'queries'"),
        (["--gpu"], 2, "--gpu was replaced: use --device cuda"),
        (["--no-gpu"], 2, "--no-gpu was replaced: use --device cpu"),
        (["--against", str(tmp_path / "missing")], 1, "not found"),
        (["--head", str(tmp_path / "nohead")], 1, "not found"),
        (["--device", "tpu", "--metrics", "linear"], 2, "--device must be auto, cpu, cuda"),
    ]
    for args, code, message in cases:
        res = _run(s, *args)
        assert res.exit_code == code, (args, res.stderr)
        assert message in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_plots(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s")
    res = _run(str(tmp_path / "s"), "--plot", str(tmp_path / "plots"), "--metrics",
               "knn,geometry")
    assert res.exit_code == 0, res.stderr
    for name in ("scores.png", "map.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    res = _run(str(tmp_path / "s"), "--plot", str(tmp_path / "plots"), "--metrics", "knn")
    assert res.exit_code == 1
    assert "scores.png exists; pass --force to overwrite it" in res.stderr
    res = _run(str(tmp_path / "s"), "--plot", str(tmp_path / "plots"), "--metrics", "knn",
               "--force")
    assert res.exit_code == 0, res.stderr


def test_plot_outputs_are_checked_before_the_work(tmp_path: Path, monkeypatch) -> None:
    """--plot naming a file, and a plot of another --map method already there, are refused
    before the store is evaluated (the evaluation faked to fail if it ran)."""
    import pairkit.eval.command as command

    noisy_store(tmp_path / "s", n_sources=10)

    def no_work(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("evaluated before the plot outputs were checked")

    monkeypatch.setattr(command, "evaluate", no_work)
    (tmp_path / "file.png").write_bytes(b"x")
    res = _run(str(tmp_path / "s"), "--plot", str(tmp_path / "file.png"), "--metrics", "knn")
    assert res.exit_code == 1
    assert f"--plot {tmp_path / 'file.png'} is a file, expected a folder" in res.stderr
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "umap.png").write_bytes(b"x")
    res = _run(str(tmp_path / "s"), "--plot", str(tmp_path / "plots"), "--map", "pca,umap",
               "--metrics", "knn")
    assert res.exit_code == 1 and "umap.png exists; pass --force" in res.stderr, res.stderr
    assert (tmp_path / "plots" / "umap.png").read_bytes() == b"x"


def write_head(folder: Path, weight: np.ndarray) -> None:
    head_mod = pytest.importorskip("pairkit.train.head",
                                   reason="pairkit/train/head.py (load_head) not available")
    import torch

    spec = head_mod.HeadSpec(kind="linear", in_dim=weight.shape[1], out_dim=weight.shape[0])
    module = head_mod.build_module(spec)
    with torch.no_grad():
        module[0].weight.copy_(torch.from_numpy(weight))
    folder.mkdir()
    head_mod.save_weights(folder, module)
    head_mod.write_config(folder, {"format": head_mod.HEAD_FORMAT, "format_version": 1,
                                   "head": head_mod.spec_dict(spec), "complete": True})


def test_head_compare(tmp_path: Path) -> None:
    noisy_store(tmp_path / "s")
    write_head(tmp_path / "identity", np.eye(8, dtype=np.float32))
    s = str(tmp_path / "s")
    args = ["--json", "--metrics", "knn,retrieval,geometry"]
    out = _json(_run(s, "--head", str(tmp_path / "identity"), "--compare", *args))
    assert set(out) == {"raw", "head"}
    for key in ("knn_top1", "precision_at_1", "map_at_r", "alignment", "uniformity"):
        assert out["head"][key] == pytest.approx(out["raw"][key], abs=1e-6), key
    rng = np.random.default_rng(0)
    write_head(tmp_path / "proj", rng.normal(size=(3, 8)).astype(np.float32))
    head_only = _json(_run(s, "--head", str(tmp_path / "proj"), *args))
    assert "raw" not in head_only and "knn_top1" in head_only
    write_head(tmp_path / "wrong", np.eye(5, dtype=np.float32))
    res = _run(s, "--head", str(tmp_path / "wrong"))
    assert res.exit_code == 1
    assert "takes vectors of dim 5, the store has dim 8" in res.stderr


def test_long_tailed_queries_are_said_once(tmp_path: Path) -> None:
    """Query classes 4x apart in size: one note (the data's, not each run's) names both
    sizes."""
    noisy_store(tmp_path / "ref", n_sources=40, seed=0)
    noisy_store(tmp_path / "test", n_sources=50, seed=1, skew=True)  # 40 / 10 sources
    write_head(tmp_path / "identity", np.eye(8, dtype=np.float32))
    res = _run(str(tmp_path / "ref"), "--against", str(tmp_path / "test"), "--head",
               str(tmp_path / "identity"), "--compare", "--metrics", "knn")
    assert res.exit_code == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "differ" in line]
    assert said == ["warning: query classes differ 4x in size (80 c0, 20 c1): top-1 is "
                    "mostly the large classes'; the mean per-class recalls weigh every "
                    "class the same"]


def test_probe_balanced(tmp_path: Path) -> None:
    """``--probe-balanced`` on long-tailed references: the probe is fitted otherwise
    (the weighted objective: tests/eval/test_linear_probe.py) and says so."""
    noisy_store(tmp_path / "ref", n_sources=100, seed=0, skew=True, noise=1.5)
    noisy_store(tmp_path / "test", n_sources=40, seed=1, noise=1.5)
    args = [str(tmp_path / "ref"), "--against", str(tmp_path / "test"), "--metrics", "linear"]
    plain = _run(*args)
    even = _run(*args, "--probe-balanced")
    assert plain.exit_code == even.exit_code == 0, plain.stderr + even.stderr
    assert "(lowest validation log-loss)" in plain.stderr
    assert "(lowest validation log-loss, every class weighed the same)" in even.stderr
    got = [_json(_run(*args, *extra, "--json", "-q")) for extra in ([], ["--probe-balanced"])]
    assert got[0]["linear_top1"] != got[1]["linear_top1"]
    # the JSON says how each probe was fitted
    assert [g["linear_probe"]["balanced"] for g in got] == [False, True]
    for g in got:
        assert g["linear_probe"]["weight_decay"] in (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


def test_gallery_of_the_queries_is_named(tmp_path: Path) -> None:
    """Issue 20.13: `--retrieval-gallery queries` printed only the reference count, as if
    the references were the gallery."""
    noisy_store(tmp_path / "s")
    r = _run(str(tmp_path / "s"), "--metrics", "retrieval", "--retrieval-gallery", "queries",
             "--json")
    out = _json(r)
    assert out["n_gallery"] == out["n_queries"]
    assert "retrieval gallery (the queries)" in r.stderr
    out = _json(_run(str(tmp_path / "s"), "--metrics", "retrieval", "--json"))
    assert "n_gallery" not in out


def test_default_ks_are_capped_at_a_small_reference_set(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): a store of fewer than ~25 sources stopped with
    "--knn-k 20 is larger than the reference set" though no k was given, losing every
    other metric. The defaults (kNN 20, recall 1, 5, 10) are capped at the set's size,
    with a note; a k that is given is still refused."""
    noisy_store(tmp_path / "q", n_sources=4, seed=1)
    noisy_store(tmp_path / "r", n_sources=4, seed=2)
    r = _run(str(tmp_path / "q"), "--against", str(tmp_path / "r"), "--json", *FAST)
    out = _json(r)
    assert "knn_top1" in out and out["n_references"] == 8
    assert "the default 20 capped at the reference set's 8 items" in r.stderr
    assert "recall" in r.stderr  # 10 capped too
    assert set(out["recall_at_k"]) == {"1", "5", "8"}
    # the capped k gives what asking for it gives
    asked = _json(_run(str(tmp_path / "q"), "--against", str(tmp_path / "r"), "--json",
                       "--knn-k", "8", "--recall-k", "1,5,8", *FAST))
    assert asked["knn_top1"] == out["knn_top1"] and asked["recall_at_k"] == out["recall_at_k"]
    r = _run(str(tmp_path / "q"), "--against", str(tmp_path / "r"), "--knn-k", "20")
    assert r.exit_code == 1 and "--knn-k 20 is larger than the reference set (8 items)" in r.output


def tiny_store(path: Path, vectors: np.ndarray, labels: list[str | None] | None) -> Store:
    """One view per source, rows in the order given (labels None: an unlabelled store)."""
    items = pd.DataFrame({"path": [f"{path.name}/{i}.png" for i in range(len(vectors))],
                          "source": [f"{path.name}/{i}" for i in range(len(vectors))],
                          "view": 0})
    if labels is not None:
        items["label"] = labels
    return write_store(path, np.asarray(vectors, dtype=np.float32), items,
                       encoder={"name": "random"}, dtype="float32")


RETRIEVAL_KEYS = {"precision_at_1", "r_precision", "map_at_r", "recall_at_k"}


def test_gallery_of_queries_needs_no_reference_labels(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): with --retrieval-gallery queries, unlabelled
    references stopped the default run with "--knn-k 20 is larger than the reference set
    (0 items)" (no k given), --metrics linear was an internal error, and one-class
    references refused retrieval among the queries, which never looks at them. Retrieval
    among the queries gives what it gives beside labelled references; kNN and the probe
    are left out with a note, or refused when listed."""
    noisy_store(tmp_path / "q", n_sources=16, seed=1)
    noisy_store(tmp_path / "rl", n_sources=12, seed=2)
    noisy_store(tmp_path / "r0", n_sources=12, seed=2, labels=False)
    noisy_store(tmp_path / "r1", n_sources=12, seed=2, classes=1)
    gal = ["--against", str(tmp_path / "q"), "--retrieval-gallery", "queries", "--json",
           "--recall-k", "1,3", "-q"]
    want = _json(_run(str(tmp_path / "rl"), *gal, "--metrics", "retrieval"))
    assert set(want) >= RETRIEVAL_KEYS
    r = _run(str(tmp_path / "r0"), *gal[:-1])
    out = _json(r)
    assert set(out) == RETRIEVAL_KEYS | {"n_queries", "n_references", "n_gallery",
                                         "alignment", "uniformity"}
    assert {k: out[k] for k in RETRIEVAL_KEYS} == {k: want[k] for k in RETRIEVAL_KEYS}
    assert "need labels, the references have none: knn, linear left out" in r.stderr
    assert "label metrics use labelled items only" not in r.stderr  # (0 of 24 references)
    for metric in ("knn", "linear", "knn,retrieval"):
        r = _run(str(tmp_path / "r0"), *gal, "--metrics", metric)
        assert r.exit_code == 1, r.output
        assert r.stderr.strip() == (f"error: --metrics {metric.split(',')[0]} need labels, "
                                    "the references have none")
    for refs in ("r0", "r1"):
        out = _json(_run(str(tmp_path / refs), *gal, "--metrics", "retrieval"))
        assert {k: out[k] for k in RETRIEVAL_KEYS} == {k: want[k] for k in RETRIEVAL_KEYS}
    out = _json(_run(str(tmp_path / "r1"), *gal))
    assert set(out) >= RETRIEVAL_KEYS and "knn_top1" not in out


def test_listed_retrieval_that_cannot_run_is_an_error(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): --metrics retrieval with no query that has a
    relevant item (no query class among the references; a one-class gallery of queries)
    was a note and exit 0, the JSON without map_at_r."""
    tiny_store(tmp_path / "ab", np.eye(3)[:2], ["a", "b"])
    cq = np.random.default_rng(2).normal(size=(4, 3))
    tiny_store(tmp_path / "cq", cq, ["c"] * 4)
    args = [str(tmp_path / "ab"), "--against", str(tmp_path / "cq"), "--json"]
    r = _run(*args, "--metrics", "retrieval")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.strip() == ("error: --metrics retrieval: no query has a relevant "
                                "reference (one of its class that is not excluded)")
    r = _run(*args, "--metrics", "retrieval", "--retrieval-gallery", "queries")
    assert r.exit_code == 1
    assert r.stderr.strip() == ("error: --metrics retrieval need at least 2 classes on the "
                                "query side (the retrieval gallery), found 1 (c)")
    # not listed: a note, the other metrics (kNN: every query wrong, its class absent)
    r = _run(*args, "--knn-k", "2", *FAST)
    out = _json(r)
    assert out["knn_top1"] == 0.0 and not RETRIEVAL_KEYS & set(out)
    assert "retrieval: no query has a relevant reference" in r.stderr
    # a gallery of queries whose classes are all single sources: nothing to retrieve
    tiny_store(tmp_path / "cd", cq[:2], ["c", "d"])
    r = _run(str(tmp_path / "ab"), "--against", str(tmp_path / "cd"), "--metrics",
             "retrieval", "--retrieval-gallery", "queries")
    assert r.exit_code == 1 and "no query has a relevant other query" in r.stderr


def test_k_larger_than_the_labelled_references_says_labelled(tmp_path: Path) -> None:
    """The count in the message is of the labelled references, and says so (it was
    printed as "the reference set (3 items)" beside n_references 5)."""
    x = np.random.default_rng(4).normal(size=(5, 3))
    tiny_store(tmp_path / "r", x, ["a", "b", None, "a", None])
    tiny_store(tmp_path / "q", x[:2], ["a", "b"])
    r = _run(str(tmp_path / "r"), "--against", str(tmp_path / "q"), "--knn-k", "4")
    assert r.exit_code == 1
    assert r.stderr.strip() == ("error: --knn-k 4 is larger than the labelled reference set "
                                "(3 items, of 5 references)")


def test_probe_without_validation_split_does_not_claim_one(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): two references a, b (a validation part by source
    takes one, the fit is left with one class) gave "linear probe weight decay 1e-06
    (lowest validation log-loss)" though no validation ran. The JSON says validated
    false, the line and a note say why and which decay was used."""
    tiny_store(tmp_path / "ab", np.eye(3)[:2], ["a", "b"])
    tiny_store(tmp_path / "q", np.random.default_rng(5).normal(size=(6, 3)), ["a", "b"] * 3)
    r = _run(str(tmp_path / "ab"), "--against", str(tmp_path / "q"), "--metrics", "linear",
             "--json")
    out = _json(r)
    assert out["linear_probe"] == {"weight_decay": 1e-6, "balanced": False,
                                   "validated": False}
    assert "lowest validation log-loss" not in r.stderr
    assert "linear probe weight decay 1e-06 (no validation split: the first of the list)" \
        in r.stderr
    assert ("linear probe: no validation split (the references less a validation part by "
            "source have 1 class): weight decay 1e-06, the first of the list, not chosen"
            in r.stderr)
    noisy_store(tmp_path / "s")
    out = _json(_run(str(tmp_path / "s"), "--metrics", "linear", "--json", *FAST))
    assert out["linear_probe"]["validated"] is True


def test_probe_max_train_leaving_one_class_is_refused_or_left_out(tmp_path):
    """Found by a bug hunt (2026-12-06): --probe-max-train 1 drew one reference, one
    class, and the "probe" still reported a top-1 (it always predicted that class);
    docs/eval.md says the probe needs 2+ classes. A listed --metrics linear is refused in
    one line (exit 1); by default the probe is left out, said."""
    noisy_store(tmp_path / "s")
    r = runner.invoke(app, ["eval", str(tmp_path / "s"), "--probe-max-train", "1",
                            "--metrics", "linear"])
    assert r.exit_code == 1, r.output
    assert r.stderr.strip().splitlines() == [
        "error: --metrics linear: --probe-max-train 1 leaves 1 class among the references the "
        "probe trains on; it needs 2 or more: raise --probe-max-train"]
    r = runner.invoke(app, ["eval", str(tmp_path / "s"), "--probe-max-train", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert "linear_top1" not in json.loads(r.stdout) and "knn_top1" in json.loads(r.stdout)
    assert "linear probe left out" in r.stderr


def test_a_held_out_part_without_any_label_has_no_labels(tmp_path: Path) -> None:
    """When every held-out source is unlabelled the query side has no labels (None, so the
    label metrics say "the queries have none"), while the references keep theirs."""
    from pairkit.eval.command import load_sides
    from pairkit.eval.split import split_by_source

    noisy_store(tmp_path / "all", n_sources=10)
    st = Store.open(tmp_path / "all")
    held = split_by_source(st.source_codes(), 0.3, 7)
    items = st.items.copy()
    items["label"] = items["label"].where(~held, None)
    write_store(tmp_path / "part", st.vectors(np.float32), items, encoder={"name": "random"},
                dtype="float32")
    sides = load_sides(tmp_path / "part", None, 0.3, 7)
    assert len(sides.queries.vectors) == int(held.sum()) == 6
    assert sides.queries.labels is None
    assert sides.references.labels is not None and None not in list(sides.references.labels)


def _eval_config(monkeypatch, tmp_path: Path, *args: str):
    """The EvalConfig and test fraction ``pairkit eval`` hands to the library (no work)."""
    import pairkit.eval.command as command
    from pairkit.errors import PairkitError

    seen = {}

    def fake(store, plot, cfg, **kw):
        seen.update(cfg=cfg, **kw)
        raise PairkitError("stopped by the test")

    monkeypatch.setattr(command, "eval_to_files", fake)
    r = _run(str(tmp_path), *args)
    assert r.exit_code == 1 and "stopped by the test" in r.stderr, r.output
    return seen


def test_cli_defaults_and_flags_reach_the_eval_config(tmp_path: Path, monkeypatch) -> None:
    """Mutation audit 5b (EV5, EV7-EV9): eval's defaults are EvalConfig's (so
    ``pairkit.api`` and the CLI agree) and --include-same-source is passed on."""
    from pairkit.eval.run import EvalConfig

    seen = _eval_config(monkeypatch, tmp_path)
    cfg, ref = seen["cfg"], EvalConfig()
    for name in ("knn_temperature", "max_r", "pair_sample", "probe_max_train", "seed",
                 "exclude_same_source", "gallery", "probe_balanced", "block_rows"):
        assert getattr(cfg, name) == getattr(ref, name), name
    assert seen["test_fraction"] == 0.2
    assert _eval_config(monkeypatch, tmp_path, "--include-same-source")[
        "cfg"].exclude_same_source is False
