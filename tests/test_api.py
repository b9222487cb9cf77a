"""The Python API: ``import pairkit`` stays light, each function gives what its command
writes, and the examples of docs/api.md run as written."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import pairkit
from pairkit.cli.main import app
from tests.conftest import make_images, random_store
from tests.proc import with_repo_path

runner = CliRunner()
DOCS = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_import_pairkit_loads_nothing_heavy() -> None:
    code = ("import sys, pairkit\n"
            "heavy = sorted(m for m in ('numpy', 'pandas', 'torch', 'faiss', 'pairkit.api')"
            " if m in sys.modules)\n"
            "names = [n for n in pairkit.__all__ if n != '__version__']\n"
            "print(heavy, callable(pairkit.mine_pairs), 'pandas' in sys.modules, names)")
    env = {**os.environ, "PYTHONPATH": with_repo_path()}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    heavy, rest = proc.stdout.split("]", 1)
    assert heavy == "[", heavy  # nothing heavy before a name is used
    assert rest.split()[0] == "True"


def test_help_loads_nothing_heavy() -> None:
    code = ("import sys\n"
            "sys.argv = ['pairkit', '--help']\n"
            "from pairkit.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('numpy', 'pandas', 'torch', 'faiss', 'pyarrow', 'PIL')"
            " if m in sys.modules), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": with_repo_path()}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert "search" in proc.stdout and "info" in proc.stdout  # the new commands are listed
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_names_are_listed_and_unknown_ones_fail() -> None:
    assert set(pairkit.API) <= set(dir(pairkit))
    for name in pairkit.API:
        assert callable(getattr(pairkit, name)), name
        assert getattr(pairkit, name).__doc__, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pairkit.nope  # noqa: B018


def test_unknown_option_is_a_usage_error(small_store) -> None:
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match="unknown option 'num_negative'"):
        pairkit.mine_pairs(small_store, num_negative=3)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("api") / "store", n_sources=30, views=2,
                        dim=16, classes=3)


def test_mine_pairs_is_what_mine_writes(store, tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["mine", str(store.root), "--hard", "-k", "3", "--seed", "1",
                            "--filter-false-negatives", "--fn-mode", "keep", "-o", str(out)])
    assert r.exit_code == 0, r.output
    table = pairkit.mine_pairs(store, num_negatives=3, seed=1, filter_false_negatives=True,
                               fn_mode="keep")

    def missing_as_none(df: pd.DataFrame) -> pd.DataFrame:  # parquet reads None back as NaN
        return df.astype(object).where(df.notna(), None)

    pd.testing.assert_frame_equal(missing_as_none(table.reset_index(drop=True)),
                                  missing_as_none(pd.read_parquet(out)), check_dtype=False)
    assert table.attrs["stats"]["rows"] == len(table)


def test_find_duplicates_is_what_dedup_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(12, 8)).astype(np.float32)
    vecs[5] = vecs[2] + 1e-4  # a near copy
    items = pd.DataFrame({"path": [f"i{i}.jpg" for i in range(12)]})
    from pairkit.core.store_writer import write_store

    st = write_store(tmp_path / "s", vecs, items, encoder={"name": "x"})
    r = runner.invoke(app, ["dedup", str(st.root), "-o", str(tmp_path / "d.csv")])
    assert r.exit_code == 0, r.output
    table = pairkit.find_duplicates(st)
    assert sorted(table["id"]) == [2, 5]
    cli = pd.read_csv(tmp_path / "d.csv")
    assert cli["id"].tolist() == table["id"].tolist()
    assert cli["keep"].tolist() == table["keep"].tolist()
    assert table.attrs["summary"]["groups"] == 1
    assert pairkit.find_duplicates(st, drop=True)["id"].tolist() == \
        table.loc[~table["keep"], "id"].tolist()


def test_evaluate_is_what_eval_prints(store) -> None:
    r = runner.invoke(app, ["eval", str(store.root), "--json", "-q", "--seed", "3"])
    assert r.exit_code == 0, r.output
    cli = json.loads(r.stdout.strip().splitlines()[-1])
    table = pairkit.evaluate(store, seed=3)
    assert list(table.columns) == ["raw"]
    assert set(table.index) == set(cli)
    for key in ("knn_top1", "map_at_r", "linear_top1", "alignment"):
        assert table.loc[key, "raw"] == pytest.approx(cli[key]), key


def test_train_head_is_what_train_writes(store, tmp_path: Path) -> None:
    pairs = pairkit.mine_pairs(store, num_negatives=2)
    pairs_file = tmp_path / "p.parquet"
    pairs.to_parquet(pairs_file)
    r = runner.invoke(app, ["train", str(store.root), "--pairs", str(pairs_file), "-o",
                            str(tmp_path / "cli"), "--epochs", "2", "--batch-size", "16",
                            "--out-dim", "8", "-q"])
    assert r.exit_code == 0, r.output
    result = pairkit.train_head(store, tmp_path / "api", pairs_file, epochs=2, batch_size=16,
                                out_dim=8)
    assert len(result.records) == 2
    cli_head, api_head = pairkit.load_head(tmp_path / "cli"), pairkit.load_head(tmp_path / "api")
    v = store.vectors()
    np.testing.assert_allclose(api_head.apply(v), cli_head.apply(v), atol=1e-5)
    # a DataFrame straight from mine_pairs trains the same head
    pairkit.train_head(store, tmp_path / "df", pairs, epochs=2, batch_size=16, out_dim=8)
    np.testing.assert_allclose(pairkit.load_head(tmp_path / "df").apply(v), api_head.apply(v),
                               atol=1e-5)


def test_store_info_and_vectors(store) -> None:
    info = pairkit.store_info(store.root)
    assert info["rows"] == 60 and info["sources"] == 30 and info["checksums"] == "ok"
    np.testing.assert_array_equal(pairkit.vectors(store.root), store.vectors())


@pytest.mark.parametrize("call, message", [
    # found by an API bug hunt (2026-12-06): each was accepted (a metric above 1, NaN
    # taken, an option ignored) or ended in a raw TypeError / ValueError
    (lambda s: pairkit.evaluate(s, knn_ks=(5, 5)), "--knn-k lists 5 twice"),
    # found by a bug hunt (2026-12-07): a metric listed twice was accepted
    (lambda s: pairkit.evaluate(s, metrics=("knn", "knn")), "^metrics lists knn twice$"),
    (lambda s: pairkit.evaluate(s, metrics="geometry,geometry"),
     "^metrics lists geometry twice$"),
    (lambda s: pairkit.evaluate(s, recall_ks=(), metrics="retrieval"), "--recall-k must not"),
    (lambda s: pairkit.evaluate(s, knn_temperature=float("nan")), "--knn-temperature must be"),
    (lambda s: pairkit.evaluate(s, seed=None), "seed must be an int, got None"),
    (lambda s: pairkit.evaluate(s, knn_ks=5), "knn_ks must be a list, got 5"),
    (lambda s: pairkit.evaluate(s, knn_ks=(2.5,)), "knn_ks must be a list of int"),
    (lambda s: pairkit.evaluate(s, against=s, test_fraction=0.7), "pick one"),
    (lambda s: pairkit.mine_pairs(s, kind="ivf", nprobe=0), "--nprobe must be >= 1, got 0"),
    (lambda s: pairkit.mine_pairs(s, min_score=float("nan")), "--min-score must be a number"),
    (lambda s: pairkit.mine_pairs(s, seed=-1), "--seed must be >= 0, got -1"),
    (lambda s: pairkit.mine_pairs(s, num_negatives="3"), "num_negatives must be an int"),
    (lambda s: pairkit.mine_pairs(s, hard=False, sampling="softmax"), "sampling needs hard"),
    (lambda s: pairkit.mine_pairs(s, hard=False, nprobe=4), "nprobe needs hard"),
    (lambda s: pairkit.mine_pairs(s, filter_false_negatives=True, fn_options={"bogus": 1}),
     "unknown option 'bogus'"),
    # mutation audit 4a (AP1, AP2): options mine refuses as doing nothing
    (lambda s: pairkit.mine_pairs(s, fn_mode="keep"),
     "fn_mode='keep' needs filter_false_negatives=True"),
    (lambda s: pairkit.mine_pairs(s, sampling_temperature=0.1),
     "sampling_temperature applies to sampling='softmax'"),
    (lambda s: pairkit.search(s, ids=[True]), "ids must be a list of int"),
    (lambda s: pairkit.search(s, ids=[3.7]), "ids must be a list of int"),
    (lambda s: pairkit.vectors(s, "int8"), "dtype must be float16, float32 or float64"),
    # found by a bug hunt (2026-12-07): None was numpy's default dtype, float64
    (lambda s: pairkit.vectors(s, dtype=None),
     "^dtype must be float16, float32 or float64, got None$"),
    (lambda s: s.vectors(None), "^dtype must be float16, float32 or float64, got None$"),
    # found by a bug hunt (2026-12-08): the probe's fields (no option of the command) were
    # taken as given: an empty list ended in IndexError, a negative or NaN decay was fitted
    # (an unbounded objective) and reported, 0 iterations scored an unfitted probe
    (lambda s: pairkit.evaluate(s, probe_weight_decays=(), metrics="linear"),
     "probe_weight_decays must not be empty"),
    (lambda s: pairkit.evaluate(s, probe_weight_decays=(1e-4, -1.0), metrics="linear"),
     "probe_weight_decays must be >= 0, got -1.0"),
    (lambda s: pairkit.evaluate(s, probe_weight_decays=(float("nan"),), metrics="linear"),
     "probe_weight_decays must be numbers, got nan"),
    (lambda s: pairkit.evaluate(s, probe_max_iter=0, metrics="linear"),
     "probe_max_iter must be >= 1, got 0"),
    # (2026-12-08) one option by both its names: the last one given was used, silently
    (lambda s: pairkit.evaluate(s, knn_ks=(5,), knn_k=(10,), metrics="knn"),
     "knn_ks and knn_k are one option: give one"),
    (lambda s: pairkit.evaluate(s, batch_size=64, block_rows=128, metrics="knn"),
     "batch_size and block_rows are one option: give one"),
    (lambda s: pairkit.mine_pairs(s, index="flat", kind="ivf"),
     "index and kind are one option: give one"),
    # (2026-12-08) maps checked as the command checks --map: an empty list drew no map
    # and maps without plot were dropped, where the command refuses both
    (lambda s: pairkit.evaluate(s, maps=[], plot=s.root.parent / "p"),
     "maps must not be empty"),
    (lambda s: pairkit.evaluate(s, maps="", plot=s.root.parent / "p"),
     "maps must not be empty"),
    (lambda s: pairkit.evaluate(s, maps="umap"), "maps needs plot"),
    (lambda s: pairkit.mine_pairs(s, dtype="float32", float16=True),
     "dtype and float16 are one option: give one"),
    (lambda s: pairkit.train_head(s, s.root.parent / "h", relation="label", name="triplet",
                                  loss="infonce"),
     "name and loss are one option: give one"),
])
def test_bad_api_values_are_usage_errors(store, call, message) -> None:
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        call(store)


def test_api_takes_numpy_numbers_and_the_device_without_hard(store) -> None:
    """The checks above take numpy's integers and floats as Python's, and a run without
    hard still takes the device its rules search on."""
    a = pairkit.evaluate(store, knn_ks=np.array([5, 10]), seed=np.int64(1),
                         knn_temperature=np.float32(0.07), metrics="knn")
    b = pairkit.evaluate(store, knn_ks=(5, 10), seed=1, knn_temperature=float(np.float32(0.07)),
                         metrics="knn")
    pd.testing.assert_frame_equal(a, b)
    easy = pairkit.mine_pairs(store, hard=False, device="cpu", num_negatives=2)
    assert len(easy) > 0


def test_api_search_takes_one_query_as_is_and_vectors_are_read_only(store) -> None:
    """A single id or text was split or iterated (a path string became one query per
    character); the array ``vectors`` hands out changed what later calls computed."""
    one, listed = pairkit.search(store, ids=3), pairkit.search(store, ids=[3])
    pd.testing.assert_frame_equal(one, listed)
    v = pairkit.vectors(store)
    with pytest.raises(ValueError, match="read-only"):
        v -= v.mean(axis=0)
    before = pairkit.mine_pairs(store, num_negatives=2)
    pd.testing.assert_frame_equal(pairkit.mine_pairs(store, num_negatives=2), before)


def test_api_evaluate_takes_the_command_s_option_names(store) -> None:
    """docs/api.md names the options as the command's without dashes; evaluate refused
    knn_k, recall_k, retrieval_gallery, batch_size and include_same_source."""
    by_cli = pairkit.evaluate(store, knn_k=(5,), recall_k=(1, 3), batch_size=64,
                              retrieval_gallery="queries", include_same_source=True)
    by_field = pairkit.evaluate(store, knn_ks=(5,), recall_ks=(1, 3), block_rows=64,
                                gallery="queries", exclude_same_source=False)
    pd.testing.assert_frame_equal(by_cli, by_field)
    from pairkit.errors import UsageError

    # a wrong value is named as it was given (it said "knn_ks must be a list, got 100")
    with pytest.raises(UsageError, match=r"^knn_k must be a list, got 100$"):
        pairkit.evaluate(store, knn_k=100)
    with pytest.raises(UsageError, match=r"^knn_ks must be a list, got 100$"):
        pairkit.evaluate(store, knn_ks=100)


def test_api_evaluate_plots_what_the_command_plots(store, tmp_path: Path) -> None:
    """``evaluate(plot=DIR)`` wrote the 2-D map but not the score histograms."""
    pairkit.evaluate(store, plot=tmp_path / "p")
    r = runner.invoke(app, ["eval", str(store.root), "--plot", str(tmp_path / "c"), "-q"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == \
        sorted(p.name for p in (tmp_path / "c").iterdir())
    assert "scores.png" in {p.name for p in (tmp_path / "p").iterdir()}


def test_docs_api_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``>>>`` example of docs/api.md, in order, in a folder holding ``photos/``
    (three classes of small images in sub-folders)."""
    make_images(tmp_path / "photos", n_per_class=6, classes=3)
    monkeypatch.chdir(tmp_path)
    text = DOCS.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, "docs/api.md", str(DOCS), 0)
    assert len(test.examples) >= 15
    runner_ = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner_.run(test)
    result = runner_.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"


# -- found by the docs hunt (hunt-c, 2026-12): the parameters the functions declare
# themselves skipped the checks of the keyword options; "no" switched a flag on


@pytest.mark.parametrize("call, message", [
    (lambda s, p: pairkit.find_duplicates(s, exact_only="no"),
     "exact_only must be a bool, got 'no'"),
    (lambda s, p: pairkit.find_duplicates(s, threshold="0.9"),
     "threshold must be a float or None, got '0.9'"),
    (lambda s, p: pairkit.find_duplicates(s, drop=1), "drop must be a bool, got 1"),
    (lambda s, p: pairkit.evaluate(s, include_same_source="no"),
     "include_same_source must be a bool or None, got 'no'"),
    (lambda s, p: pairkit.evaluate(s, compare="yes"), "compare must be a bool, got 'yes'"),
    (lambda s, p: pairkit.mine_pairs(s, hard="yes"), "hard must be a bool, got 'yes'"),
    (lambda s, p: pairkit.mine_pairs(s, as_dataset="x"), "as_dataset must be a bool, got 'x'"),
    (lambda s, p: pairkit.train_head(s, p / "h", relation="instance", resume="x"),
     "resume must be a bool, got 'x'"),
    (lambda s, p: pairkit.train_head(s, p / "h", relation="instance", force="no"),
     "force must be a bool, got 'no'"),
    (lambda s, p: pairkit.pair_loader(pd.DataFrame(), s, shuffle="x"),
     "shuffle must be a bool or None, got 'x'"),
    (lambda s, p: pairkit.search(s, ids=[0], include_same_source="no"),
     "include_same_source must be a bool, got 'no'"),
    (lambda s, p: pairkit.search(s, ids=[0], device="gpu"),
     "--device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (lambda s, p: pairkit.open_store(s.root, verify="no"), "verify must be a bool, got 'no'"),
    (lambda s, p: pairkit.store_info(s.root, verify="no"), "verify must be a bool, got 'no'"),
    # wrong types that ended in a raw TypeError / AttributeError deep inside
    (lambda s, p: pairkit.mine_pairs(s, relation=5), "relation must be a str or None, got 5"),
    (lambda s, p: pairkit.mine_pairs(s, format=3), "format must be a str, got 3"),
    (lambda s, p: pairkit.mine_pairs(s, filter_false_negatives=True, positives="3"),
     "positives must be an int or None, got '3'"),
    (lambda s, p: pairkit.mine_pairs(s, filter_false_negatives=True, positive_neighbours=2.5),
     "positive_neighbours must be an int or None, got 2.5"),
    (lambda s, p: pairkit.mine_pairs(s, filter_false_negatives=True, positive_whitening="x"),
     "positive_whitening must be a float or None, got 'x'"),
    (lambda s, p: pairkit.mine_pairs(s, filter_false_negatives=True, fn_rules=[1]),
     "fn_rules must be a list of str, got [1]"),
    (lambda s, p: pairkit.mine_pairs(s, filter_false_negatives=True, fn_options=[1]),
     "fn_options must be a dict or None, got [1]"),
    (lambda s, p: pairkit.mine_pairs(5), "store must be a Store, a str or an os.PathLike, got 5"),
    (lambda s, p: pairkit.evaluate(s, test_fraction="0.2"),
     "test_fraction must be a float or None, got '0.2'"),
    (lambda s, p: pairkit.evaluate(s, test_fraction=float("nan")),
     "--test-fraction must be a number, got nan"),
    (lambda s, p: pairkit.evaluate(s, metrics=5), "metrics must be a str, a list of str or None"),
    (lambda s, p: pairkit.evaluate(s, head=5), "head must be a str, an os.PathLike or None"),
    (lambda s, p: pairkit.evaluate(s, plot=p / "pl", maps=[1]),
     "maps must be a list of str, got [1]"),
    (lambda s, p: pairkit.train_head(s, p / "h", pairs=5, epochs=1),
     "pairs must be a str, an os.PathLike, a DataFrame or None, got 5"),
    (lambda s, p: pairkit.pairs_to_dataset(5),
     "table must be a DataFrame, a str or an os.PathLike, got 5"),
    (lambda s, p: pairkit.embed_images(p / "photos", p / "s2", model=None),
     "model must be a str, got None"),
    (lambda s, p: pairkit.search(s, images=[5]),
     "images must be a list of str or os.PathLike, got [5]"),
    (lambda s, p: pairkit.search(s, ids=[0], k="3"), "k must be an int, got '3'"),
    (lambda s, p: pairkit.find_duplicates(s, warn="print"),
     "warn must be a callable or None, got 'print'"),
])
def test_declared_parameters_are_checked_as_options_are(store, tmp_path: Path, call,
                                                         message) -> None:
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match="^" + re_escape(message)):
        call(store, tmp_path)
    assert not (tmp_path / "h").exists() and not (tmp_path / "s2").exists()  # before any work


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_declared_parameters_take_numpy_numbers_lists_and_paths(store, tmp_path: Path) -> None:
    """What the check lets through is what the functions did with a plain value."""
    pd.testing.assert_frame_equal(pairkit.search(store, ids=np.array([3]), k=np.int64(2)),
                                  pairkit.search(store, ids=[3], k=2))
    a = pairkit.mine_pairs(store, filter_false_negatives=True,
                           fn_rules=["label", "mutual-neighbour"],
                           positives=np.int64(2), positive_whitening=np.float32(0.5))
    b = pairkit.mine_pairs(store, filter_false_negatives=True, fn_rules="label,mutual-neighbour",
                           positives=2, positive_whitening=0.5)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(pairkit.evaluate(store, metrics=["knn", "geometry"]),
                                  pairkit.evaluate(store, metrics="knn,geometry"))
    # include_same_source is the inverse of EvalConfig's exclude_same_source
    pd.testing.assert_frame_equal(
        pairkit.evaluate(store, against=store, include_same_source=True, metrics="knn"),
        pairkit.evaluate(store, against=store, exclude_same_source=False, metrics="knn"))
    assert pairkit.evaluate(store, against=store, include_same_source=True,
                            metrics="knn").loc["knn_top1", "raw"] == 1.0


def test_store_info_takes_a_store_object(store) -> None:
    """store_info was the one function that took only a path (TypeError from pathlib)."""
    assert pairkit.store_info(store) == pairkit.store_info(store.root)
    assert pairkit.store_info(store)["rows"] == 60


def test_evaluate_maps_take_the_command_s_comma_list(store, tmp_path: Path) -> None:
    """maps="pca" was split into ('p', 'c', 'a'): 'must be a comma list of pca, umap, got p'."""
    pairkit.evaluate(store, plot=tmp_path / "a", maps="pca", metrics="knn")
    pairkit.evaluate(store, plot=tmp_path / "b", maps=["pca"], metrics="knn")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == \
        sorted(p.name for p in (tmp_path / "b").iterdir())
    assert "map.png" in {p.name for p in (tmp_path / "a").iterdir()}


def test_search_names_a_missing_query_image(store, tmp_path: Path) -> None:
    """It said 'file vanished during the run' for a file that never existed."""
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match=r"^query image .*nope\.jpg not found$"):
        pairkit.search(store, images=[tmp_path / "nope.jpg"])


@pytest.mark.parametrize("kw, message", [
    (dict(head="bogus"), "--head must be one of residual, linear, mlp, got bogus"),
    (dict(relation="bogus"), "--relation must be one of instance, label, got bogus"),
    (dict(relation="instance", head="residual", out_dim=8),
     "a residual head keeps the input dim (16): --out-dim 8 needs --head mlp or linear"),
])
def test_bad_train_values_are_usage_errors(store, tmp_path: Path, kw, message) -> None:
    """They were PairkitError (the command: exit 1, not the documented 2)."""
    from pairkit.errors import UsageError

    pairs = pairkit.mine_pairs(store, num_negatives=2)
    with pytest.raises(UsageError, match="^" + re_escape(message)):
        pairkit.train_head(store, tmp_path / "h", None if "relation" in kw else pairs,
                           epochs=1, **kw)
    assert not (tmp_path / "h").exists()


def test_mine_and_train_take_the_command_s_option_names(store, tmp_path: Path) -> None:
    """docs/api.md: options are named as the command's; mine refused index and dtype,
    train refused pair_whitening="all" (the command's default)."""
    pd.testing.assert_frame_equal(pairkit.mine_pairs(store, index="flat", dtype="float16"),
                                  pairkit.mine_pairs(store, kind="flat", float16=True))
    pd.testing.assert_frame_equal(pairkit.mine_pairs(store, dtype="float32"),
                                  pairkit.mine_pairs(store, float16=False))
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match="^dtype must be float16 or float32, got 'int8'$"):
        pairkit.mine_pairs(store, dtype="int8")
    with pytest.raises(UsageError, match="^index needs hard=True"):
        pairkit.mine_pairs(store, hard=False, index="flat")
    a = pairkit.train_head(store, tmp_path / "a", relation="instance", epochs=1,
                           pair_whitening="all")
    b = pairkit.train_head(store, tmp_path / "b", relation="instance", epochs=1)
    assert a.records[-1]["loss"] == pytest.approx(b.records[-1]["loss"])
    with pytest.raises(UsageError, match="^pair_whitening must be an int, None or 'all'"):
        pairkit.train_head(store, tmp_path / "c", relation="instance", epochs=1,
                           pair_whitening="some")


def test_issues_leaks_import_and_project_are_what_their_commands_write(store,
                                                                       tmp_path: Path) -> None:
    """The commands that had no function: issues, dedup --against, import, project."""
    from pairkit.train.head import load_head

    # issues: the flagged rows of the command's table (every row with all_rows)
    out = tmp_path / "issues.csv"
    r = runner.invoke(app, ["issues", str(store.root), "--all", "-o", str(out)])
    assert r.exit_code == 0, r.output
    cli = pd.read_csv(out)
    table = pairkit.find_issues(store, all_rows=True)
    assert table[["id", "issue", "flagged"]].values.tolist() == \
        cli[["id", "issue", "flagged"]].values.tolist()
    np.testing.assert_allclose(table["score"].to_numpy(float), cli["score"], rtol=1e-6)
    assert table.attrs["summary"]["sources"] == 30
    assert pairkit.find_issues(store, checks="outlier", all_rows=True)["issue"].unique() \
        .tolist() == ["outlier"]
    # import: the vectors and items given, L2-normalised
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(6, 8)).astype(np.float32)
    np.save(tmp_path / "e.npy", vecs)
    pd.DataFrame({"path": [f"x{i}.jpg" for i in range(6)]}).to_csv(tmp_path / "i.csv",
                                                                   index=False)
    imported = pairkit.import_embeddings(tmp_path / "e.npy", tmp_path / "i.csv",
                                         tmp_path / "imp", dtype="float32")
    np.testing.assert_allclose(imported.vectors(),
                               vecs / np.linalg.norm(vecs, axis=1, keepdims=True), atol=1e-6)
    # dedup --against: the test copy of a train row is a leak
    other = vecs.copy()
    other[0] = vecs[4] + 1e-4
    np.save(tmp_path / "o.npy", other)
    test = pairkit.import_embeddings(tmp_path / "o.npy", tmp_path / "i.csv", tmp_path / "t",
                                     dtype="float32")
    leaks = pairkit.find_duplicates(test, against=imported)
    assert leaks[["id", "other_id", "match"]].values.tolist()[0] == [0, 4, "near"]
    assert leaks.attrs["summary"]["leaks"] == len(leaks)
    with pytest.raises(pairkit.errors.UsageError, match="keep does not apply to against"):
        pairkit.find_duplicates(test, against=imported, keep="first")
    # project: the head's outputs as a store
    head = tmp_path / "h"
    pairkit.train_head(store, head, epochs=1, batch_size=16, out_dim=8, relation="instance")
    projected = pairkit.project_store(store, head, tmp_path / "proj", dtype="float32")
    np.testing.assert_allclose(projected.vectors(), load_head(head).apply(store.vectors()),
                               atol=1e-5)
    with pytest.raises(pairkit.errors.PairkitError, match="exists; pass --force"):
        pairkit.project_store(store, head, tmp_path / "proj")


def test_embed_images_takes_file_urls(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``embed_images`` turned its arguments into Path
    objects, so ``file://`` (and ``s3://``) URLs the command takes became ``file:/...``
    and were refused as mangled URLs; a mangled ``file:`` path was told the wrong fix."""
    from pairkit.core.remote import check_local
    from pairkit.errors import UsageError

    make_images(tmp_path / "imgs", n_per_class=1, classes=2)
    st = pairkit.embed_images(f"file://{tmp_path}/imgs", f"file://{tmp_path}/st",
                              model="pixels")
    assert st.count == 2 and (tmp_path / "st" / "manifest.json").is_file()
    with pytest.raises(UsageError, match="the URL file:///tmp/x turned into"):
        check_local(Path("file:///tmp/x"))


def test_embed_images_takes_a_labels_path_and_checks_its_progress(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``labels=Path(...)`` was refused ("must be a str")
    where every other path argument takes one, and a progress object without the hook's
    methods was a raw AttributeError once embedding had started."""
    from pairkit.errors import UsageError

    make_images(tmp_path / "imgs", n_per_class=1, classes=2)
    table = tmp_path / "labels.csv"
    paths = sorted(p.relative_to(tmp_path / "imgs").as_posix()
                   for p in (tmp_path / "imgs").rglob("*.jpg"))
    table.write_text("path,label\n" + "".join(f"{p},L{i}\n" for i, p in enumerate(paths)))
    st = pairkit.embed_images(tmp_path / "imgs", tmp_path / "st", model="pixels",
                              labels=table)
    assert sorted(st.labels().tolist()) == ["L0", "L1"]
    with pytest.raises(UsageError, match="progress must have the methods start, advance"):
        pairkit.embed_images(tmp_path / "imgs", tmp_path / "st2", model="pixels", progress=5)
    assert not (tmp_path / "st2").exists()


def test_options_that_are_the_function_s_own_arguments(store, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``fn_options={"rules": ...}`` (a
    FalseNegativeConfig field, listed as known) and ``project_store(..., head=...)`` with
    the head also given in its place crashed with a raw TypeError ("multiple values")."""
    from pairkit.errors import UsageError

    by_options = pairkit.mine_pairs(store, relation="label", num_negatives=2,
                                    filter_false_negatives=True,
                                    fn_options={"rules": ["label"]})
    by_rules = pairkit.mine_pairs(store, relation="label", num_negatives=2,
                                  filter_false_negatives=True, fn_rules="label")
    pd.testing.assert_frame_equal(by_options, by_rules)
    with pytest.raises(UsageError, match="fn_rules and fn_options' rules are one option"):
        pairkit.mine_pairs(store, filter_false_negatives=True, fn_rules="label",
                           fn_options={"rules": "label"})
    with pytest.raises(UsageError, match="rules must be"):
        pairkit.mine_pairs(store, filter_false_negatives=True, fn_options={"rules": 5})
    with pytest.raises(UsageError, match="^project_store: multiple values for argument 'head'"):
        pairkit.project_store(store, tmp_path / "h", tmp_path / "p", head="x")
    assert not (tmp_path / "p").exists()


def test_a_bad_dtype_is_a_usage_error(store, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``import_embeddings(dtype="float64")`` and
    ``project_store(dtype="int8")`` raised a plain PairkitError (``except UsageError``
    missed it), while the commands' --dtype is a usage error (exit 2)."""
    from pairkit.errors import UsageError

    np.save(tmp_path / "e.npy", np.ones((3, 4), np.float32))
    pd.DataFrame({"path": ["a.jpg", "b.jpg", "c.jpg"]}).to_csv(tmp_path / "i.csv", index=False)
    with pytest.raises(UsageError, match="^--dtype must be one of float16, float32, got float64"):
        pairkit.import_embeddings(tmp_path / "e.npy", tmp_path / "i.csv", tmp_path / "s",
                                  dtype="float64")
    with pytest.raises(UsageError, match="^--dtype must be one of float16, float32, got int8"):
        pairkit.project_store(store, tmp_path / "h", tmp_path / "p", dtype="int8")
    assert not (tmp_path / "s").exists() and not (tmp_path / "p").exists()


def test_a_wrong_type_is_named_in_one_line_not_printed_whole(store, tmp_path) -> None:
    """Found by a bug hunt (2026-12-07): a DataFrame or an array given where a path was
    wanted was printed whole in the UsageError (dozens of lines); the message names its
    type and shape in one line. A short value is still shown as it is."""
    from pairkit.errors import UsageError

    items = pd.DataFrame({"path": [f"{i}.png" for i in range(100)]})
    with pytest.raises(UsageError) as info:
        pairkit.import_embeddings(tmp_path / "e.npy", items, tmp_path / "out")
    assert "\n" not in str(info.value)
    assert str(info.value).endswith("got a DataFrame of shape (100, 1)")
    with pytest.raises(UsageError) as info:
        pairkit.evaluate(store, knn_ks=np.zeros((40, 40)))
    assert "\n" not in str(info.value) and "got a list of 40 values" in str(info.value)
    with pytest.raises(UsageError, match=r"got 'no'"):
        pairkit.evaluate(store, seed="no")
