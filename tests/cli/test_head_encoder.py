"""project and eval --head refuse a head trained on another encoder's store (hunt-u 4):
the head's config.json records the training store's encoder, compared as eval --against
compares two stores; heads from before that record load as they did."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.core.store_writer import write_store
from tests.conftest import random_store

runner = CliRunner()
FAST = ["--epochs", "1", "--batch-size", "16", "--head", "mlp", "--out-dim", "8",
        "--device", "cpu", "-q"]


def other_encoder_store(path, encoder):  # noqa: ANN001, ANN201
    """random_store's rows (dim 12) recorded as made by ``encoder``."""
    st = random_store(path.with_name(path.name + "-src"), n_sources=10, views=2, dim=12)
    return write_store(path, st.vectors(), st.items, encoder=encoder)


@pytest.fixture
def head(tmp_path):  # noqa: ANN001, ANN201
    random_store(tmp_path / "s", n_sources=10, views=2, dim=12)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", *FAST])
    assert r.exit_code == 0, r.stderr
    return tmp_path / "h"


@pytest.mark.parametrize("command", ["project", "eval"])
def test_head_of_another_encoder_is_refused(tmp_path, head, command):
    other_encoder_store(tmp_path / "t", {"name": "timm/other"})
    args = (["project", str(tmp_path / "t"), "--head", str(head), "-o", str(tmp_path / "p")]
            if command == "project" else ["eval", str(tmp_path / "t"), "--head", str(head)])
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"head {head} was trained on vectors of another encoder" in lines[0]
    assert "name \"random\" vs \"timm/other\"" in lines[0]
    assert "train a head on this store's encoder" in lines[0]
    assert not (tmp_path / "p").exists()


def test_same_encoder_other_provenance_is_accepted(tmp_path, head):
    other_encoder_store(tmp_path / "t", {"name": "random", "imported_from": "x.npy"})
    r = runner.invoke(app, ["project", str(tmp_path / "t"), "--head", str(head),
                            "-o", str(tmp_path / "p"), "-q"])
    assert r.exit_code == 0, r.stderr


def test_head_without_an_encoder_record_still_loads(tmp_path, head):
    cfg = json.loads((head / "config.json").read_text())
    del cfg["store"]["encoder"]
    (head / "config.json").write_text(json.dumps(cfg))
    other_encoder_store(tmp_path / "t", {"name": "timm/other"})
    r = runner.invoke(app, ["project", str(tmp_path / "t"), "--head", str(head),
                            "-o", str(tmp_path / "p"), "-q"])
    assert r.exit_code == 0, r.stderr
    assert Store.open(tmp_path / "p").count == 20


def test_encoder_records_compared_without_their_provenance():
    """Mutation audit 4a (EM2, EM3): two .npy imports of one encoder differ in file name
    and hash, and are still one encoder; a record differing in more fields than shown
    names the first three (sorted) and counts the rest."""
    from pairkit.core.encoder_match import encoder_difference, same_encoder

    a = {"name": "clip", "imported_from": "train.npy", "sha256": "aa"}
    b = {"name": "clip", "imported_from": "test.npy", "sha256": "bb"}
    assert same_encoder(a, b)
    assert encoder_difference(a, b) == ""
    assert not same_encoder(a, {**b, "name": "dino"})
    c = {"name": "x", "dim": 1, "a": 1, "b": 2, "sha256": "1"}
    d = {"name": "y", "dim": 2, "a": 3, "b": 4, "sha256": "2"}
    assert encoder_difference(c, d) == "a 1 vs 3; b 2 vs 4; dim 1 vs 2, and 1 more fields"
    assert encoder_difference(c, d, shown=4) == 'a 1 vs 3; b 2 vs 4; dim 1 vs 2; name "x" vs "y"'


@pytest.mark.parametrize("command", ["project", "eval"])
def test_a_head_of_another_dim_is_told_by_its_dim_first(tmp_path, head, command):
    """docs/project.md's seen example: a head (12 -> 8) applied to the store it projected
    (dim 8, whose encoder record carries the head) is refused by the dims, exit 1, not by
    the encoder records' 'head null vs {...}' (exit 2) that the encoder check found first."""
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(head),
                            "-o", str(tmp_path / "p"), "-q"])
    assert r.exit_code == 0, r.stderr
    args = (["project", str(tmp_path / "p"), "--head", str(head), "-o", str(tmp_path / "x")]
            if command == "project" else ["eval", str(tmp_path / "p"), "--head", str(head)])
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    want = (f"error: head {head} takes vectors of dim 12, store {tmp_path / 'p'} has dim 8: "
            "train a head on this store's encoder" if command == "project"
            else f"error: head {head} takes vectors of dim 12, the store has dim 8")
    assert r.stderr.strip().splitlines() == [want]
    assert not (tmp_path / "x").exists()


def test_a_head_and_a_projected_store_of_its_dim_are_refused_in_one_complete_line(tmp_path):
    """A head applied to a store that a head projected (same dim, so the dims pass) was
    refused with the projecting head's record as JSON cut at 40 characters: `head null vs
    {"complete": true, "head": {"hidden":...)`. One complete line names both heads."""
    random_store(tmp_path / "s", n_sources=10, views=2, dim=12)
    same_dim = [*FAST[:-4], "12", *FAST[-3:]]  # --out-dim 12: the input's dim
    h, h2, s, p = (str(tmp_path / n) for n in ("h", "h2", "s", "p"))
    r = runner.invoke(app, ["train", s, "-o", h, "--relation", "instance", *same_dim])
    assert r.exit_code == 0, r.stderr
    assert runner.invoke(app, ["project", s, "--head", h, "-o", p, "-q"]).exit_code == 0
    for args in (["project", p, "--head", h, "-o", str(tmp_path / "pp")],
                 ["eval", p, "--head", h]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        assert r.stderr == (
            f"error: head {h} was trained on unprojected vectors, but store {p} holds "
            f"vectors projected by head {h} (pairkit project): apply it to the store they "
            "were projected from\n")
    assert not (tmp_path / "pp").exists()
    # the other way round: a head trained on the projected store, applied to the raw one
    r = runner.invoke(app, ["train", p, "-o", h2, "--relation", "instance", *same_dim])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["project", s, "--head", h2, "-o", str(tmp_path / "p2")])
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        f"error: head {h2} was trained on vectors projected by head {h}, but store {s} "
        f"holds unprojected vectors (pairkit project): apply it to a store projected by "
        f"head {h}\n")


def test_a_projecting_head_is_named_by_its_path_in_an_encoder_difference():
    """The head record of a projected store ran to hundreds of characters and was cut at
    40 (`{"complete": true, "head": {"hidden":...`): it is named by its path."""
    from pairkit.core.encoder_match import encoder_difference

    record = {"path": "/heads/h", "weights_sha256": "ab" * 32, "head": {"hidden": 64}}
    assert encoder_difference({"name": "a"}, {"name": "b", "head": record}) == (
        'head null vs projected by head /heads/h; name "a" vs "b"')
