"""Pair tables as training data: examples, the image dataset and its DataLoader, the
datasets.Dataset export, and a notebook-style script that mines pairs and trains a small
torch model from the loader on the CPU."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import pairkit
from pairkit.cli.main import app
from pairkit.core.store import Store
from pairkit.errors import PairkitError, UsageError
from pairkit.train.pair_data import PairImages, pair_examples, to_hf_dataset
from tests.conftest import make_images

runner = CliRunner()


def test_triplet_rows_group_into_examples_in_rank_order() -> None:
    t = pd.DataFrame({"anchor_id": [0, 0, 0, 1, 1, 2], "positive_id": [5, 5, 5, 6, 6, 7],
                      "negative_id": [3, 4, 8, 9, -1, 2],
                      "false_negative": [False, True, False, False, False, False]})
    a, p, negs = pair_examples(t)
    assert a.tolist() == [0, 1, 2] and p.tolist() == [5, 6, 7]
    assert [n.tolist() for n in negs] == [[3, 8], [9], [2]]  # flagged and -1 left out
    _, _, kept = pair_examples(t, keep_flagged=True)
    assert kept[0].tolist() == [3, 4, 8]


def test_n_tuple_and_labeled_pair_tables() -> None:
    t = pd.DataFrame({"anchor_id": [0, 1], "positive_id": [2, 3], "negative_id_1": [4, 5],
                      "negative_id_10": [8, -1], "negative_id_2": [6, 7]})
    a, p, negs = pair_examples(t)
    assert a.tolist() == [0, 1] and [n.tolist() for n in negs] == [[4, 6, 8], [5, 7]]
    with pytest.raises(UsageError, match="labeled-pair"):
        pair_examples(pd.DataFrame({"anchor_id": [0], "other_id": [1], "label": [1]}))


def test_empty_negative_cells_are_no_negative_without_a_cast_warning(
        recwarn: pytest.WarningsRecorder) -> None:
    """Found by a bug hunt (2026-12-07): an empty negative cell (a CSV n-tuple table with
    blank slots: pandas reads the column as floats) was cast to int64 as it came, numpy's
    'invalid value encountered in cast' warning printed by pair_loader; it is no negative,
    as train reads it."""
    t = pd.DataFrame({"anchor_id": [0, 1], "positive_id": [2, 3],
                      "negative_id_1": [4, 5], "negative_id_2": [6, np.nan]})
    _, _, negs = pair_examples(t)
    assert [n.tolist() for n in negs] == [[4, 6], [5]]
    t = pd.DataFrame({"anchor_id": [0, 0, 1], "positive_id": [2, 2, 3],
                      "negative_id": [4, np.nan, 5]})
    _, _, negs = pair_examples(t)
    assert [n.tolist() for n in negs] == [[4], [5]]
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_n_tuple_rows_flagged_in_any_slot_are_left_out() -> None:
    """An n-tuple row built from negatives flagged in any slot is flagged as a whole and left
    out of the examples (kept with ``keep_flagged``)."""
    from pairkit.core.pairs import MinedPairs, build_pair_table

    mined = MinedPairs(
        anchors=np.array([0, 1]), positives=np.array([5, 6]),
        pos_scores=np.array([0.9, 0.8], np.float32),
        neg_ids=np.array([[2, 3], [4, 7]]),
        neg_scores=np.array([[0.5, 0.4], [0.3, 0.2]], np.float32),
        neg_ranks=np.array([[0, 1], [0, 1]]),
        neg_flags=np.array([[False, False], [True, False]]),
        neg_reasons=np.array([[None, None], ["label", None]], dtype=object),
    )
    paths = np.array([f"{i}.png" for i in range(8)], dtype=object)
    t = build_pair_table(mined, "n-tuple", "s", paths, flag_columns=True)
    assert t["false_negative"].tolist() == [False, True]
    a, p, negs = pair_examples(t)
    assert a.tolist() == [0] and p.tolist() == [5] and [n.tolist() for n in negs] == [[2, 3]]
    a, p, negs = pair_examples(t, keep_flagged=True)
    assert a.tolist() == [0, 1] and [n.tolist() for n in negs] == [[2, 3], [4, 7]]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    tmp = tmp_path_factory.mktemp("pd")
    make_images(tmp / "images", n_per_class=4, classes=3)
    return pairkit.embed_images(tmp / "images", tmp / "store", model="fake", views=2,
                                labels="folder")


def _resize(img):  # noqa: ANN001, ANN202
    from torchvision.transforms.functional import resize, to_tensor

    return to_tensor(resize(img, [12, 12]))


def test_mined_positive_rows_do_not_empty_the_negatives(store: Store) -> None:
    """Found by an API bug hunt (2026-12-06): a table with mined positives (the default
    with the filter) gave examples of 0 negatives, so every batch's negatives were ``[]``.
    The mined rows are extra positives, not examples."""
    pairs = pairkit.mine_pairs(store, num_negatives=2, filter_false_negatives=True,
                               fn_rules="near-duplicate,mutual-neighbour,cluster")
    assert (pairs["positive_kind"] == "mined").any()
    a, _, negs = pair_examples(pairs)
    views = pairs[pairs["positive_kind"] == "view"]
    assert len(a) == views.groupby(["anchor_id", "positive_id"]).ngroups
    assert min(len(n) for n in negs) >= 1
    _, _, n = next(iter(pairkit.pair_loader(pairs, store, batch_size=4, transform=_resize)))
    assert n.shape[:2] == (4, min(len(x) for x in negs))


def test_items_are_the_table_s_images_through_the_transform(store: Store) -> None:
    from PIL import Image

    pairs = pairkit.mine_pairs(store, num_negatives=3)
    data = PairImages(pairs, store, transform=_resize)
    assert len(data) == store.count and data.skipped == 0
    root = Path(store.manifest["image_root"])
    paths = store.items["path"]
    first = pairs[pairs["anchor_id"] == data.anchors[5]]
    anchor, positive, negatives = data[5]
    assert negatives.shape == (3, 3, 12, 12)
    for got, item in [(anchor, data.anchors[5]), (positive, first["positive_id"].iloc[0]),
                      *zip(negatives, first["negative_id"], strict=True)]:
        want = _resize(Image.open(root / paths[item]).convert("RGB"))
        assert np.array_equal(got.numpy(), want.numpy())
    loader = pairkit.pair_loader(pairs, store, transform=_resize, batch_size=5, shuffle=False)
    a, p, n = next(iter(loader))
    assert a.shape == (5, 3, 12, 12) and p.shape == (5, 3, 12, 12)
    assert n.shape == (5, 3, 3, 12, 12)
    assert np.array_equal(a[0].numpy(), data[0][0].numpy())


def test_a_store_id_column_of_empty_cells_is_read_as_train_reads_it(store: Store) -> None:
    """Found by a bug hunt (2026-12-07): a table whose store_id cells are empty (a CSV
    with the column blanked) was refused as "mined from store nan"; train accepts it (with
    a note), and so does the loader now, as it accepts a table without the column (its
    paths still checked against the store's). Another store's id is still refused."""
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    blank = pairs.assign(store_id=np.nan)
    assert len(PairImages(blank, store, transform=_resize)) == len(PairImages(
        pairs, store, transform=_resize))
    mixed = pairs.assign(store_id=[np.nan, "other"] + [store.content_id] * (len(pairs) - 2))
    with pytest.raises(PairkitError, match="mined from store other"):
        PairImages(mixed, store, transform=_resize)


def test_negatives_per_example_and_skipped(store: Store) -> None:
    pairs = pairkit.mine_pairs(store, num_negatives=3)
    short = pairs.drop(index=pairs.index[pairs["anchor_id"] == 0][:2])  # anchor 0: 1 left
    assert len(PairImages(short, store, transform=_resize)) == store.count  # fewest: 1
    assert PairImages(short, store, transform=_resize)[0][2].shape[0] == 1
    three = PairImages(short, store, transform=_resize, negatives=3)
    assert len(three) == store.count - 1 and three.skipped == 1


def test_refusals(store: Store, tmp_path: Path) -> None:
    from pairkit.core.store_writer import write_store

    pairs = pairkit.mine_pairs(store, num_negatives=2)
    other = write_store(tmp_path / "other", store.vectors()[:4],
                        pd.DataFrame({"path": ["a.png", "../../etc/passwd", "c.png", "d.png"]}),
                        encoder={"name": "x"})
    with pytest.raises(PairkitError, match="was mined from store"):
        PairImages(pairs, other)
    with pytest.raises(PairkitError, match="anchor_id 23 is not a row of store"):
        PairImages(pairs.drop(columns="store_id"), other)  # the paths' check: ids too
    with pytest.raises(PairkitError, match="no image_root"):
        PairImages(pd.DataFrame({"anchor_id": [0], "positive_id": [2], "negative_id": [3]}),
                   other)
    writer_manifest = other.manifest | {"image_root": str(tmp_path)}
    other.manifest = writer_manifest  # an image root, and a path that leaves it
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [2], "negative_id": [1]})
    with pytest.raises(PairkitError, match="holds '..'"):
        PairImages(t, other)
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [2], "negative_id": [99]})
    with pytest.raises(PairkitError, match="negative_id 99 is not a row of store"):
        PairImages(t, other)
    # mutation audit 4a (TI2, TI3): the first id past the rows, and an id below -1
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [2], "negative_id": [4]})
    with pytest.raises(PairkitError, match=r"negative_id 4 is not a row of store .*\(4 rows\)"):
        PairImages(t, other)
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [-2], "negative_id": [3]})
    with pytest.raises(PairkitError, match="positive_id holds negative ids"):
        PairImages(t, other)
    # (TI5) every negative slot of an n-tuple table, not only the first
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [2], "negative_id_1": [3],
                      "negative_id_2": [7]})
    with pytest.raises(PairkitError, match="negative_id_2 7 is not a row of store"):
        PairImages(t, other)


def test_hf_export_with_paths_and_bytes(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasets")
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    ds = to_hf_dataset(pairs)
    assert ds.num_rows == len(pairs) and ds.column_names == list(pairs.columns)
    assert ds["negative_id"] == pairs["negative_id"].tolist()
    path = store.root.parent / "pairs-for-hf.parquet"
    pairs.to_parquet(path)  # a table's path, as pair_loader and train take it
    assert pairkit.pairs_to_dataset(path)["negative_id"] == ds["negative_id"]
    ds = pairkit.pairs_to_dataset(pairs, store, images="bytes")
    root = Path(store.manifest["image_root"])
    fmt = ds.with_format(None).cast_column("negative_image",
                                           __import__("datasets").Image(decode=False))
    for i in (0, 7):
        assert fmt[i]["negative_image"]["bytes"] == (root / pairs["negative_path"][i]).read_bytes()
    with pytest.raises(UsageError, match="needs the store"):
        to_hf_dataset(pairs, images="bytes")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(PairkitError, match="pip install datasets"):
        to_hf_dataset(pairs)


def test_hf_export_with_bytes_refuses_a_table_that_does_not_fit(store: Store,
                                                                 tmp_path: Path) -> None:
    """Found by a CLI bug hunt (2026-12-06): the bytes were read by the table's paths with
    no check that the table is the store's (its store_id, and paths that agree with its
    ids), where PairImages refuses another store's table. Refused before ``datasets``
    is even imported."""
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    other = pairs.assign(store_id="0123456789abcdef")
    with pytest.raises(PairkitError, match="came from another store"):
        to_hf_dataset(other, store, images="bytes")
    moved = pairs.copy()
    moved.loc[3, "negative_path"] = "elsewhere.png"
    with pytest.raises(PairkitError, match="the table says 'elsewhere.png'"):
        to_hf_dataset(moved, store, images="bytes")


def test_webdataset_members_read_back(tmp_path: Path) -> None:
    make_images(tmp_path / "img", n_per_class=2, classes=1)
    with tarfile.open(tmp_path / "00000.tar", "w") as tf:
        for p in sorted((tmp_path / "img").rglob("*.*")):
            tf.add(p, arcname=f"k{p.stem}.{p.suffix[1:]}")
    r = runner.invoke(app, ["embed", str(tmp_path / "00000.tar"), "-o", str(tmp_path / "s"),
                            "--model", "fake", "-q"])
    assert r.exit_code == 0, r.output
    st = Store.open(tmp_path / "s")
    from pairkit.encode.item_images import read_item_bytes

    files = sorted((tmp_path / "img").rglob("*.*"))
    for i, path in enumerate(st.items["path"]):
        assert path.startswith("00000.tar/")
        assert read_item_bytes(st.manifest["image_root"], path) == files[i].read_bytes()
    with pytest.raises(PairkitError, match="no member"):
        read_item_bytes(st.manifest["image_root"], "00000.tar/nope.jpg")


def test_notebook_mines_pairs_and_trains_a_small_model(tmp_path: Path) -> None:
    """The three lines of docs/api.md in a training loop: the loss goes down."""
    import torch

    make_images(tmp_path / "photos", n_per_class=6, classes=3)
    store = pairkit.embed_images(tmp_path / "photos", tmp_path / "store", model="fake",
                                 labels="folder")
    pairs = pairkit.mine_pairs(store, num_negatives=2)  # label relation: same-class positives
    assert pairs.attrs["stats"]["relation"].startswith("label")
    loader = pairkit.pair_loader(pairs, store, transform=_resize, batch_size=12,
                                 generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(32, 16))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = torch.nn.TripletMarginLoss(margin=1.0)
    epoch_loss = []
    for _ in range(8):
        total = 0.0
        for anchors, positives, negatives in loader:
            b, k = negatives.shape[:2]
            za, zp = model(anchors), model(positives)
            zn = model(negatives.flatten(0, 1)).view(b, k, -1)
            loss = sum(loss_fn(za, zp, zn[:, j]) for j in range(k)) / k
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * b
        epoch_loss.append(total / len(loader.dataset))
    assert len(loader.dataset) == 18
    assert np.isfinite(epoch_loss).all()
    assert epoch_loss[-1] < 0.8 * epoch_loss[0], epoch_loss


def test_hf_export_with_bytes_of_n_tuple_and_flagged_tables(store: Store) -> None:
    """Found by a bug hunt (2026-12-06): an n-tuple table, or one with --fn-mode keep's
    flag columns, failed in pyarrow ("Couldn't cast array of type string to null"): the
    features came from the table's first 0 rows, where a text column is typed null."""
    pytest.importorskip("datasets")
    for t in (pairkit.mine_pairs(store, num_negatives=3, format="n-tuple"),
              pairkit.mine_pairs(store, num_negatives=3, filter_false_negatives=True,
                                 fn_mode="keep")):
        ds = pairkit.pairs_to_dataset(t, store, images="bytes")
        assert ds.num_rows == len(t)


def test_loader_refuses_a_table_whose_paths_are_another_store_s(store: Store,
                                                                  tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): PairImages compared only the store_id, so a table
    of another store with the same content id (one .npy imported with two item tables)
    loaded other images than its paths name; to_hf_dataset and train refuse it."""
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    moved = pairs.copy()
    moved.loc[3, "negative_path"] = "elsewhere.png"
    with pytest.raises(PairkitError, match="the table says 'elsewhere.png'"):
        PairImages(moved, store, transform=_resize)


@pytest.mark.parametrize("options, message", [
    ({"negatives": "2"}, "negatives must be an int"),
    ({"negatives": 1.5}, "negatives must be an int"),
    ({"negatives": True}, "negatives must be an int"),
    ({"batch_size": 0}, "--batch-size must be >= 1, got 0"),
    ({"seed": 1}, "unknown option 'seed'"),
    ({"negatives": 9}, "no example of the pair table has 9 negatives (most: 3)"),
])
def test_loader_options_are_checked(store: Store, options: dict, message: str) -> None:
    """Found by a bug hunt (2026-12-06): raw TypeErrors from slicing or DataLoader, a
    bool taken as 1, and torch's "num_samples=0" when no example was left."""
    pairs = pairkit.mine_pairs(store, num_negatives=3)
    with pytest.raises((UsageError, PairkitError), match=f"^{__import__('re').escape(message)}"):
        pairkit.pair_loader(pairs, store, **options)
    with pytest.raises(PairkitError, match="the pair table has no examples"):
        pairkit.pair_loader(pairs.head(0), store)


def test_triplet_examples_do_not_depend_on_row_order() -> None:
    """Found by a bug hunt (2026-12-06): examples were runs of consecutive rows, so a
    shuffled table split them (71 examples of one negative instead of 24 of three), and
    negatives came in table order, not rank order."""
    t = pd.DataFrame({"anchor_id": [0, 1, 0, 1, 0], "positive_id": [5, 6, 5, 6, 5],
                      "negative_id": [8, 9, 3, 2, 4], "neg_rank": [2, 1, 0, 0, 1]})
    a, p, negs = pair_examples(t)
    assert a.tolist() == [0, 1] and p.tolist() == [5, 6]  # first appearance order
    assert [n.tolist() for n in negs] == [[3, 4, 8], [2, 9]]


def test_triplet_examples_whose_negatives_are_all_flagged_are_kept(store: Store) -> None:
    """Found by a bug hunt (2026-12-06): flagged rows were left out before the rows were
    grouped into examples, so an (anchor, positive) whose negatives were all flagged
    (``fn_mode="keep"``) vanished, with ``skipped`` 0 and ``negatives=0`` no help. A
    flagged triplet row removes that negative, not the example."""
    t = pd.DataFrame({"anchor_id": [0, 0, 1, 1], "positive_id": [5, 5, 6, 6],
                      "negative_id": [3, 4, 8, 9],
                      "false_negative": [True, True, False, True]})
    a, p, negs = pair_examples(t)
    assert a.tolist() == [0, 1] and p.tolist() == [5, 6]
    assert [n.tolist() for n in negs] == [[], [8]]
    k = pairkit.mine_pairs(store, num_negatives=3)  # flagged as --fn-mode keep flags them
    k["false_negative"] = (k["anchor_id"] < 4) | (k["neg_rank"] == 0)
    examples = k.groupby(["anchor_id", "positive_id"]).ngroups
    for n in (None, 0):
        data = PairImages(k, store, transform=_resize, negatives=n)
        assert (len(data), data.skipped) == (examples, 0)
    two = PairImages(k, store, transform=_resize, negatives=2)
    assert (len(two), two.skipped) == (examples - 4, 4)


def test_loader_takes_a_sampler_a_batch_sampler_or_no_batching(store: Store) -> None:
    """Found by a bug hunt (2026-12-06): pair_loader always passed its defaults
    ``batch_size=32, shuffle=True``, so a ``sampler`` (DistributedSampler) or a
    ``batch_sampler`` failed with DataLoader's raw ValueError, ``batch_size=None`` was
    refused, and bad DataLoader options (``num_workers=-1``) were raw ValueErrors."""
    from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

    pairs = pairkit.mine_pairs(store, num_negatives=2)
    n = store.count
    sampler = DistributedSampler(range(n), num_replicas=2, rank=0, shuffle=False)
    a, _, neg = next(iter(pairkit.pair_loader(pairs, store, transform=_resize, sampler=sampler,
                                              batch_size=3)))
    assert a.shape == (3, 3, 12, 12) and neg.shape == (3, 2, 3, 12, 12)
    batches = BatchSampler(SequentialSampler(range(n)), 5, drop_last=False)
    sizes = [len(b[0]) for b in pairkit.pair_loader(pairs, store, transform=_resize,
                                                     batch_sampler=batches)]
    assert sizes == [5] * (n // 5) + ([n % 5] if n % 5 else [])
    a, _, neg = next(iter(pairkit.pair_loader(pairs, store, transform=_resize,
                                              batch_size=None)))
    assert a.shape == (3, 12, 12) and neg.shape == (2, 3, 12, 12)
    for options, message in [
            ({"num_workers": -1}, "num_workers"),
            ({"prefetch_factor": 2}, "prefetch_factor"),
            ({"sampler": sampler, "shuffle": True}, "mutually exclusive"),
            ({"batch_sampler": batches, "batch_size": 4}, "mutually exclusive")]:
        with pytest.raises(UsageError, match=message):
            pairkit.pair_loader(pairs, store, **options)


def test_loader_shuffles_by_default(store: Store) -> None:
    """``shuffle`` None (the default) is on; False is table order; a given sampler sets the
    order (no shuffle passed)."""
    from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler

    pairs = pairkit.mine_pairs(store, num_negatives=2)
    assert isinstance(pairkit.pair_loader(pairs, store).sampler, RandomSampler)
    assert isinstance(pairkit.pair_loader(pairs, store, shuffle=False).sampler,
                      SequentialSampler)
    sampler = DistributedSampler(range(store.count), num_replicas=2, rank=0, shuffle=False)
    assert pairkit.pair_loader(pairs, store, sampler=sampler).sampler is sampler


def test_hf_export_with_bytes_of_nullable_nulls_and_of_an_empty_table(store: Store) -> None:
    """Found by a bug hunt (2026-12-06): with ``images="bytes"``, a ``pd.NA`` null path
    (``convert_dtypes()``, a nullable-dtype parquet read) was read as the image '<NA>', and
    an empty table failed in pyarrow ("Unsupported cast from double to struct")."""
    pytest.importorskip("datasets")
    t = pairkit.mine_pairs(store, num_negatives=3, format="n-tuple").convert_dtypes()
    t.loc[0, "negative_path_3"] = pd.NA
    t.loc[0, "negative_id_3"] = -1
    ds = pairkit.pairs_to_dataset(t, store, images="bytes")
    assert ds.num_rows == len(t) and ds[0]["negative_image_3"] is None
    assert ds[1]["negative_image_3"] is not None
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    empty = pairkit.pairs_to_dataset(pairs.head(0), store, images="bytes")
    assert empty.num_rows == 0 and "anchor_image" in empty.features


def test_zero_negatives_come_as_an_empty_stacked_tensor(store: Store) -> None:
    """Found by a bug hunt (2026-12-06): with ``negatives=0`` (in-batch negatives; also the
    default when an example's negatives were all flagged) the negatives were a list
    ``[]``, not the documented (batch, 0, channels, height, width) tensor."""
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    assert PairImages(pairs, store, transform=_resize, negatives=0)[0][2].shape == (0, 3, 12, 12)
    a, _, neg = next(iter(pairkit.pair_loader(pairs, store, negatives=0, transform=_resize,
                                              batch_size=2)))
    assert a.shape == (2, 3, 12, 12) and neg.shape == (2, 0, 3, 12, 12)


@pytest.mark.parametrize("column", ["anchor_id", "positive_id"])
def test_a_table_without_an_id_column_is_refused_as_train_refuses_it(store: Store,
                                                                     column: str) -> None:
    """Found by a bug hunt (2026-12-08): pair_loader and pairs_to_dataset(images="bytes")
    of a triplet table without anchor_id or positive_id raised pandas' ``KeyError:
    'anchor_id'`` from the check that the table fits the store; train says
    ``pair table lacks column anchor_id``."""
    pytest.importorskip("datasets")
    pairs = pairkit.mine_pairs(store, num_negatives=2).drop(columns=column)
    with pytest.raises(PairkitError, match=f"pair table lacks column {column}"):
        pairkit.pair_loader(pairs, store)
    with pytest.raises(PairkitError, match=f"pair table lacks column {column}"):
        pairkit.pairs_to_dataset(pairs, store, images="bytes")
    ntuple = pd.DataFrame({"anchor_id": [0], "positive_id": [2], "negative_id_1": [3]})
    with pytest.raises(PairkitError, match=f"pair table lacks column {column}"):
        pairkit.pair_loader(ntuple.drop(columns=column), store)
