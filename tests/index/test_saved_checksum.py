"""A saved FAISS index is checked (size + sha256, sealed description) before
faiss.read_index ever sees it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.integrity import sha256_file
from pairkit.errors import PairkitError
from pairkit.index.open import open_searcher
from pairkit.index.options import IndexOptions
from pairkit.index.saved import index_paths, load_index
from tests.conftest import random_store

runner = CliRunner()


@pytest.fixture
def indexed(tmp_path: Path):
    store = random_store(tmp_path / "s", n_sources=60, views=2, dim=8)
    (store.root / "index").mkdir()
    (store.root / "index" / ".flat.faiss.abcd1234.tmp").write_bytes(b"killed mid-save")
    r = runner.invoke(app, ["index", str(store.root), "--index", "flat", "-q"])
    assert r.exit_code == 0, r.output
    assert not (store.root / "index" / ".flat.faiss.abcd1234.tmp").exists()
    return store


def test_checksum_recorded_and_verified(indexed):
    fpath, jpath = index_paths(indexed.root, "flat")
    meta = json.loads(jpath.read_text())
    assert meta["sha256"] == sha256_file(fpath) and meta["bytes"] == fpath.stat().st_size
    assert load_index(indexed.root, "flat", indexed.content_id, indexed.count) is not None


def test_damaged_index_is_refused_before_faiss_reads_it(indexed, tmp_path, monkeypatch):
    fpath, _ = index_paths(indexed.root, "flat")
    data = bytearray(fpath.read_bytes())
    data[len(data) // 2] ^= 16
    fpath.write_bytes(bytes(data))
    import faiss

    monkeypatch.setattr(faiss, "read_index", lambda *a: pytest.fail("read an unverified file"))
    with pytest.raises(PairkitError, match="does not match its checksum .* pairkit index "
                                           "--force"):
        load_index(indexed.root, "flat", indexed.content_id, indexed.count)
    monkeypatch.undo()
    # FAISS asked for by name: on a GPU host without faiss-gpu, auto is the torch search,
    # which needs no saved index
    r = runner.invoke(app, ["mine", str(indexed.root), "--hard", "--index", "flat",
                            "--backend", "faiss", "-o", str(tmp_path / "p.csv")])
    assert r.exit_code == 1 and "does not match its checksum" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_edited_or_old_descriptions_are_not_trusted(indexed):
    """An unsealed description (hand-edited, or written before checksums) is ignored:
    the index is rebuilt in memory, never loaded."""
    _, jpath = index_paths(indexed.root, "flat")
    meta = json.loads(jpath.read_text())
    meta["spec"]["nprobe"] = 1
    jpath.write_text(json.dumps(meta))
    assert load_index(indexed.root, "flat", indexed.content_id, indexed.count) is None
    for key in ("sha256", "bytes", "self_sha256"):
        meta.pop(key)
    jpath.write_text(json.dumps(meta))
    assert load_index(indexed.root, "flat", indexed.content_id, indexed.count) is None
    x = indexed.vectors(np.float32)
    p = open_searcher(x, IndexOptions(kind="flat", device="cpu"), store_root=indexed.root,
                      content_id=indexed.content_id)
    assert p.origin == "built"


def test_index_does_not_call_a_damaged_file_up_to_date(indexed):
    """`pairkit index` looked only at the description: a damaged .faiss was "up to date"
    while every mine stopped on its checksum."""
    fpath, _ = index_paths(indexed.root, "flat")
    data = bytearray(fpath.read_bytes())
    data[len(data) // 2] ^= 16
    fpath.write_bytes(bytes(data))
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "flat"])
    assert r.exit_code == 1 and "does not match its checksum" in r.output, r.output
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "flat", "--force", "-q"])
    assert r.exit_code == 0, r.output
    assert load_index(indexed.root, "flat", indexed.content_id, indexed.count) is not None


def test_a_rebuild_killed_between_its_files_leaves_no_torn_pair(indexed, monkeypatch):
    """The new .faiss was renamed into place before its description was written: killed
    in between, the old description named the new bytes ("up to date", then a checksum
    error in mine). The old description goes first now: a kill leaves no saved index."""
    import pairkit.index.saved as saved
    from pairkit.index.command import index_to_files

    index_to_files(indexed.root, IndexOptions(kind="hnsw"))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(saved, "dump_sealed", killed)
    with pytest.raises(KeyboardInterrupt):
        index_to_files(indexed.root, IndexOptions(kind="hnsw", hnsw_m=16), force=True)
    monkeypatch.undo()
    assert load_index(indexed.root, "hnsw", indexed.content_id, indexed.count) is None
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "hnsw"])
    assert r.exit_code == 0 and "built hnsw" in r.output, r.output
    assert load_index(indexed.root, "hnsw", indexed.content_id, indexed.count) is not None


def test_options_the_kind_does_not_use_are_not_recorded(indexed):
    """--nlist on flat, --seed on hnsw did nothing, yet were saved and compared: the rerun
    was refused with "exists with other options (flat, asked for flat)"."""
    from pairkit.index.command import index_to_files

    assert IndexOptions(kind="flat", nlist=7, seed=3, hnsw_m=8).resolved(120, 8) == \
        IndexOptions(kind="flat").resolved(120, 8)
    assert IndexOptions(kind="hnsw", seed=3, nlist=5).resolved(120, 8) == \
        IndexOptions(kind="hnsw").resolved(120, 8)
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "flat"])
    assert r.exit_code == 0 and "up to date" in r.output, r.output
    # since a mine bug hunt (2026-12-06) the command refuses a knob of another kind given
    # with an explicit kind (it builds nothing); the resolved options above still drop one
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "flat", "--nlist", "7"])
    assert r.exit_code == 2 and "--nlist applies to --index ivf or ivfpq" in r.output
    index_to_files(indexed.root, IndexOptions(kind="ivf", nlist=2), force=True)
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "ivf", "--nlist", "3"])
    assert r.exit_code == 1 and "(--nlist 2, asked for 3" in r.output, r.output
    # more cells than rows: cut, and said
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "ivf", "--nlist", "500",
                            "--force"])
    assert r.exit_code == 0 and "--nlist 500 cut to the 120 rows" in r.output, r.output


def test_an_unknown_index_kind_is_a_usage_error(indexed) -> None:
    """A bad --index value is a usage error (exit 2) in Python too, not a failure."""
    import pairkit
    from pairkit.errors import UsageError

    with pytest.raises(UsageError, match="--index must be one of"):
        IndexOptions(kind="annoy").resolved(10, 4)
    with pytest.raises(UsageError, match="--index must be one of"):
        open_searcher(np.eye(4, dtype=np.float32), IndexOptions(kind="annoy"))
    with pytest.raises(UsageError, match="must be one of"):
        pairkit.mine_pairs(indexed, kind="annoy")


def test_a_file_named_index_in_the_store_is_one_line(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): an internal error (FileExistsError)."""
    store = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    (store.root / "index").write_text("hi")
    r = runner.invoke(app, ["index", str(store.root), "--index", "flat"])
    assert r.exit_code == 1
    assert "holds a file named index where pairkit keeps its saved indexes" in r.output
    assert (store.root / "index").read_text() == "hi"


def test_a_cut_nprobe_is_said_as_a_cut_nlist_is(tmp_path: Path) -> None:
    store = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["index", str(store.root), "--index", "ivf", "--nlist", "4",
                            "--nprobe", "16"])
    assert r.exit_code == 0, r.output
    assert "ivf(nlist=4, nprobe=4)" in r.output and "--nprobe 16 cut to the 4 cells" in r.output


def test_a_refused_rebuild_names_the_options(indexed) -> None:
    """Found by a bug hunt (hunt-s 9): "exists with other options (float16 False, asked for
    True)", "(hnsw m 32, asked for 8)": dataclass fields, not the options typed."""
    from pairkit.index.command import index_to_files

    index_to_files(indexed.root, IndexOptions(kind="hnsw"), force=True)
    for extra, what in ((["--dtype", "float16"], "--dtype float32, asked for float16"),
                        (["--hnsw-m", "8"], "--hnsw-m 32, asked for 8"),
                        (["--ef-search", "20"], "--ef-search 128, asked for 20")):
        r = runner.invoke(app, ["index", str(indexed.root), "--index", "hnsw", *extra])
        assert r.exit_code == 1, r.output
        assert f"exists with other options ({what}); pass --force" in r.output, r.output
    saved = IndexOptions(kind="hnsw", hnsw_m=32)
    assert IndexOptions(kind="hnsw", hnsw_m=8, float16=True).asked_otherwise(saved, 120, 8) \
        == "--hnsw-m 32, asked for 8; --dtype float32, asked for float16"


def test_an_index_of_other_rows_is_rebuilt_not_called_up_to_date(indexed) -> None:
    """Mutation audit 5a: a saved index whose sealed, intact description names other rows
    (the store was rebuilt since) is neither "up to date" for ``pairkit index`` nor a
    reason to ask for ``--force``: it is replaced by one of these rows."""
    from pairkit.core.integrity import dump_sealed
    from pairkit.index.saved import read_index_meta, saved_spec

    _, jpath = index_paths(indexed.root, "flat")
    meta = read_index_meta(jpath) | {"content_id": "0" * 16}  # resealed below
    with open(jpath, "w") as fh:
        dump_sealed(meta, fh)
    assert read_index_meta(jpath)["content_id"] == "0" * 16  # still sealed, bytes intact
    assert saved_spec(indexed.root, "flat", indexed.content_id) is None
    assert saved_spec(indexed.root, "flat", "0" * 16) is not None
    assert load_index(indexed.root, "flat", indexed.content_id, indexed.count) is None
    r = runner.invoke(app, ["index", str(indexed.root), "--index", "flat"])
    assert r.exit_code == 0 and "up to date" not in r.output, r.output
    assert read_index_meta(jpath)["content_id"] == indexed.content_id
    assert load_index(indexed.root, "flat", indexed.content_id, indexed.count) is not None
