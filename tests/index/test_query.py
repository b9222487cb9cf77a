"""pairkit search: item, image and text queries against brute force, the table, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.index.query import COLUMNS, QueryRequest, search_store
from tests.conftest import random_store

runner = CliRunner()


def search(*args: object):  # noqa: ANN201
    return runner.invoke(app, ["search", *map(str, args)])


def brute(vectors: np.ndarray, q: np.ndarray, allowed: np.ndarray, k: int) -> list[int]:
    """Top-k ids by exact dot product, ties by id, among ``allowed`` rows."""
    scores = vectors.astype(np.float64) @ q.astype(np.float64)
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [int(i) for i in order if allowed[i]][:k]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return random_store(tmp_path_factory.mktemp("q") / "store", n_sources=25, views=3, dim=16)


def test_item_queries_match_brute_force_without_their_source(store: Store) -> None:
    v = store.vectors()
    src = store.source_codes()
    table = search_store(store, QueryRequest(ids=(0, 7, 40), k=5))
    assert tuple(table.columns) == COLUMNS
    for q in (0, 7, 40):
        got = table[table["query"] == f"id:{q}"]
        assert got["rank"].tolist() == [0, 1, 2, 3, 4]
        assert got["id"].tolist() == brute(v, v[q], src != src[q], 5)
        np.testing.assert_allclose(got["score"], v[got["id"]] @ v[q], atol=1e-5)
        assert (got["query_kind"] == "item").all()
    items = store.items
    np.testing.assert_array_equal(table["path"], items["path"].to_numpy()[table["id"]])
    np.testing.assert_array_equal(table["label"], items["label"].to_numpy()[table["id"]])


def test_include_same_source_finds_the_item_itself(store: Store) -> None:
    v = store.vectors()
    table = search_store(store, QueryRequest(ids=(4,), k=3, include_same_source=True))
    assert table["id"].tolist() == brute(v, v[4], np.ones(len(v), bool), 3)
    assert table["id"].iloc[0] == 4


def test_k_larger_than_the_store_gives_every_other_item(store: Store) -> None:
    table = search_store(store, QueryRequest(ids=(0,), k=1000))
    assert len(table) == store.count - 3  # all but the 3 views of its source


@pytest.mark.parametrize("k", ["9223372036854775807", "99999999999999999999"])
def test_a_huge_k_is_every_other_item_too(store: Store, k: str) -> None:
    """Found by a bug hunt (2026-12-07): ``-k`` near or past 2**63 was an internal error
    (OverflowError adding the query's own source to k, AssertionError from faiss on the
    wrapped k), not the documented "fewer when the store holds fewer"."""
    r = search(store.root, 0, "-k", k, "-o", "-")
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == store.count - 3


@pytest.fixture(scope="module")
def image_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    from tests.conftest import make_images

    tmp = tmp_path_factory.mktemp("img")
    make_images(tmp / "images", n_per_class=4, classes=3)
    r = runner.invoke(app, ["embed", str(tmp / "images"), "-o", str(tmp / "store"), "--model",
                            "fake", "--labels", "folder", "-q"])
    assert r.exit_code == 0, r.output
    return Store.open(tmp / "store")


def test_image_query_is_embedded_like_embed(image_store: Store) -> None:
    """A stored image as a query: its vector is the stored one (float16 rounding aside),
    so it is its own nearest neighbour at score 1, and the rest match brute force."""
    from pairkit.encode.query import encode_images, encoder_request

    root = Path(image_store.manifest["image_root"])
    items = image_store.items
    v = image_store.vectors()
    for row in (0, 5):
        path = root / items["path"][row]
        q = encode_images(encoder_request(image_store, "cpu"), [str(path)])[0]
        np.testing.assert_allclose(q, v[row], atol=2e-3)
        table = search_store(image_store, QueryRequest(images=(str(path),), k=4))
        assert table["id"].iloc[0] == row and table["score"].iloc[0] == pytest.approx(1, abs=2e-3)
        # found by a bug hunt (2026-12-06): 1.000006 (float16 rows, a float32 query)
        assert table["score"].between(-1, 1).all()
        assert table["id"].tolist() == brute(v, q, np.ones(len(v), bool), 4)
        assert (table["query_kind"] == "image").all() and (table["query"] == str(path)).all()


def test_cli_table_outputs(image_store: Store, tmp_path: Path) -> None:
    root = Path(image_store.manifest["image_root"])
    img = root / image_store.items["path"][2]
    r = search(image_store.root, img, 3, "-k", "2")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["query_kind"], x["rank"]) for x in rows] == [("image", 0), ("image", 1),
                                                            ("item", 0), ("item", 1)]
    assert rows[0]["id"] == 2 and rows[2]["query"] == "id:3"
    out = tmp_path / "hits.csv"
    assert search(image_store.root, 3, "-k", "2", "-o", out).exit_code == 0
    assert pd.read_csv(out)["id"].tolist() == [x["id"] for x in rows[2:]]
    again = search(image_store.root, 3, "-o", out)
    assert again.exit_code == 1 and "--force" in again.output
    assert search(image_store.root, 3, "-o", out, "--force").exit_code == 0


@pytest.mark.parametrize("args, message", [
    (["no-such-file.jpg"], "neither an image file nor an item id"),
    (["99999"], "item id 99999 is not in store"),
    (["75"], "item id 75 is not in store"),  # the store's 75 rows are ids 0..74
    ([], "give at least one query"),
    (["1", "-k", "0"], "-k must be >= 1"),
    (["1", "-o", "x.txt"], ""),
    (["\uff13"], "neither an image file nor an item id"),  # a full-width 3 was item 3
    (["/dev/null"], "is not a regular file"),  # it was "a folder"
])
def test_bad_queries_are_usage_errors(store: Store, args: list[str], message: str) -> None:
    r = search(store.root, *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_image_and_text_queries_need_the_encoder(store: Store, tmp_path: Path) -> None:
    img = tmp_path / "q.png"
    from PIL import Image

    Image.new("RGB", (8, 8)).save(img)
    for args in ([img], ["--text", "a dog"]):
        r = search(store.root, *args)
        assert r.exit_code == 2
        assert "was not made by pairkit embed" in r.output
        assert len(r.output.strip().splitlines()) == 1


def test_text_needs_an_open_clip_store(image_store: Store) -> None:
    r = search(image_store.root, "--text", "a dog")
    assert r.exit_code == 2
    assert r.output.strip() == (f"error: text queries need an open_clip store; "
                                f"{image_store.root} was embedded with fake, which has no "
                                "text tower")


def test_text_query_matches_open_clip_encode_text(tmp_path: Path) -> None:
    """An open_clip store (random ViT-S-32 weights, offline): the text query's scores are
    the dot products of open_clip's own ``encode_text`` (normalised) with the stored image
    vectors, computed here independently."""
    import open_clip
    import torch

    from tests.conftest import make_images

    make_images(tmp_path / "images", n_per_class=2, classes=2)
    r = runner.invoke(app, ["embed", str(tmp_path / "images"), "-o", str(tmp_path / "s"),
                            "--model", "openclip/ViT-S-32", "--pretrained", "none", "--seed",
                            "3", "-q"])
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "s")
    table = search_store(st, QueryRequest(texts=("a red square", "two dogs"), k=4))
    torch.manual_seed(3)
    model = open_clip.create_model("ViT-S-32", pretrained=None).eval()
    tokens = open_clip.get_tokenizer("ViT-S-32")(["a red square", "two dogs"])
    with torch.no_grad():
        t = model.encode_text(tokens).float().numpy()
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    v = st.vectors()
    for n, text in enumerate(("a red square", "two dogs")):
        got = table[table["query"] == text]
        assert (got["query_kind"] == "text").all()
        assert got["id"].tolist() == brute(v, t[n], np.ones(len(v), bool), 4)
        np.testing.assert_allclose(got["score"], v[got["id"]] @ t[n], atol=2e-3)


def test_json_lines_of_a_store_without_labels_write_null(tmp_path: Path) -> None:
    """A store without labels (or with some missing) searched to JSON Lines, the default
    output: the label is null (it was an internal error on pandas' missing string)."""
    from pairkit.core.store_writer import write_store

    rng = np.random.default_rng(0)
    items = pd.DataFrame({"path": [f"s{i}.jpg" for i in range(6)],
                          "source": [f"s{i}.jpg" for i in range(6)], "view": 0,
                          "label": ["a", None, "b", None, "a", "b"]})
    for name, table in (("none", items.drop(columns="label")), ("some", items)):
        root = tmp_path / name
        write_store(root, rng.normal(size=(6, 8)).astype(np.float32), table,
                    encoder={"name": "random"})
        r = search(root, 1, "-k", "5")
        assert r.exit_code == 0, r.output
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(rows) == 5
        want = {None} if name == "none" else {"a", "b", None}
        assert {x["label"] for x in rows} == want


def test_an_item_query_left_without_neighbours_is_said(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): a store of one source's views: the query's rows
    were all left out, and the table was empty without a word, exit 0."""
    from tests.conftest import random_store

    one = random_store(tmp_path / "one", n_sources=1, views=3, dim=8)
    r = search(one.root, 0)
    assert r.exit_code == 0, r.output
    assert "note: 1 item query has no neighbours (id:0)" in r.stderr
    assert "id:0" in search(one.root, 0, "--include-same-source").stdout


def test_an_existing_output_is_refused_before_the_search(store: Store, tmp_path: Path,
                                                          monkeypatch) -> None:
    """Mutation audit 5a: ``pairkit search -o EXISTING`` without ``--force`` stops before
    any work (the search of a big store is not run to be thrown away)."""
    from pairkit.errors import PairkitError
    from pairkit.index import query
    from pairkit.index.search_command import search_to_files

    out = tmp_path / "near.csv"
    out.write_text("kept\n")

    def no_search(*_a, **_k):
        raise AssertionError("searched before the output was checked")

    monkeypatch.setattr(query, "search_store", no_search)
    with pytest.raises(PairkitError, match="exists; pass --force to overwrite it"):
        search_to_files(store.root, str(out), QueryRequest(ids=(0,), k=2))
    assert out.read_text() == "kept\n"


def test_an_output_inside_the_store_is_refused(store: Store, monkeypatch) -> None:
    """Mutation audit 5a: ``pairkit search STORE -o STORE/near.csv`` is bad usage (an
    output written into the store it reads), refused before the search."""
    from pairkit.errors import UsageError
    from pairkit.index import query
    from pairkit.index.search_command import search_to_files

    def no_search(*_a, **_k):
        raise AssertionError("searched before the output was checked")

    monkeypatch.setattr(query, "search_store", no_search)
    with pytest.raises(UsageError, match="choose another"):
        search_to_files(store.root, str(store.root / "near.csv"), QueryRequest(ids=(0,), k=2))
    assert not (store.root / "near.csv").exists()
