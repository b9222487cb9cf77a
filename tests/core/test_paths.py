"""Item paths stay under the image root: import refuses others, resolving commands check
them again; line-oriented output refuses names with newlines and points to -0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.paths import check_output_apart, path_problem, resolve_item_path, same_file
from pairkit.core.store_writer import write_store
from pairkit.errors import PairkitError, UsageError

runner = CliRunner()


@pytest.mark.parametrize(("path", "reason"), [
    ("a/b.jpg", None), ("./a.jpg", None), ("a..b.jpg", None), ("..a.jpg", None),
    ("../../../../etc/passwd", "holds '..'"), ("a/../../b.jpg", "holds '..'"),
    ("/etc/shadow", "is absolute"), ("\\\\server\\share", "is absolute"),
    ("a\\..\\..\\b", "holds '..'"), ("", "is empty"), ("a\0b", "NUL"), (3, "not text"),
])
def test_path_problem(path, reason):
    got = path_problem(path)
    assert (got is None) if reason is None else (reason in got)


def test_resolve_item_path(tmp_path):
    assert resolve_item_path(tmp_path, "a/b.jpg") == tmp_path / "a" / "b.jpg"
    assert resolve_item_path(tmp_path, "../x") is None
    assert resolve_item_path(tmp_path, "/etc/shadow") is None


@pytest.mark.parametrize(("bad", "message"), [
    ("../../../../etc/passwd", "row 1: path '../../../../etc/passwd' holds '..'"),
    ("/etc/shadow", "row 1: path '/etc/shadow' is absolute"),
    ("", "row 1: path '' is empty"),
])
def test_import_refuses_paths_outside_the_root(tmp_path, bad, message):
    np.save(tmp_path / "emb.npy", np.eye(3, dtype=np.float32))
    pd.DataFrame({"path": ["a.jpg", bad, "c.jpg"]}).to_csv(tmp_path / "items.csv", index=False)
    r = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                            str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert r.exit_code == 1
    assert message in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def _two_copies(tmp_path, paths: list[str], image_root=None):
    """A store whose two items are exact copies (one dedup group)."""
    store = tmp_path / "store"
    extra = {"image_root": str(image_root)} if image_root else None
    write_store(store, np.array([[1.0, 0.0], [1.0, 0.0]], np.float32),
                pd.DataFrame({"path": paths}), dtype="float32", extra=extra)
    return store


def test_dedup_refuses_to_print_escaping_paths_as_absolute(tmp_path):
    """A store made before import checked paths: dedup --absolute --drop must not hand
    /etc/shadow to a delete pipeline."""
    store = _two_copies(tmp_path, ["a.jpg", "/etc/shadow"], image_root=tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "--absolute", "--drop", "--paths-only"])
    assert r.exit_code == 1
    assert "item path '/etc/shadow' is absolute" in r.output
    assert "/etc/shadow\n" not in r.stdout
    store = _two_copies(tmp_path / "ok", ["a.jpg", "b.jpg"], image_root=tmp_path)
    r = runner.invoke(app, ["dedup", str(store), "--absolute", "--paths-only"])
    assert r.exit_code == 0 and r.stdout.splitlines() == [str(tmp_path / "a.jpg"),
                                                          str(tmp_path / "b.jpg")]


def test_paths_only_refuses_newlines_and_points_to_print0(tmp_path):
    store = _two_copies(tmp_path, ["a.jpg", "evil\n/etc/passwd"])
    r = runner.invoke(app, ["dedup", str(store), "--paths-only"])
    assert r.exit_code == 1 and r.stdout == ""
    assert "path 'evil\\n/etc/passwd' holds a newline" in r.output
    assert "use -0 (--print0)" in r.output
    r = runner.invoke(app, ["dedup", str(store), "--paths-only", "-0"])
    assert r.exit_code == 0 and r.stdout == "a.jpg\0evil\n/etc/passwd\0"


def test_an_output_folder_that_holds_an_input_is_refused(tmp_path):
    """`-o DIR` (replaced with --force) must not hold an input: the input would be lost;
    an output beside the input, or a missing one, is fine."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    table = out / "sub" / "pairs.parquet"
    table.write_bytes(b"x")
    with pytest.raises(UsageError, match=f"the input {table} is inside -o {out}"):
        check_output_apart(out, [None, "-", table])
    with pytest.raises(UsageError, match="is inside the input"):
        check_output_apart(out / "sub" / "new.parquet", [out / "sub"])
    check_output_apart(tmp_path / "other", [table])
    check_output_apart(out / "new", [table])


def test_an_output_in_a_folder_this_user_cannot_write_is_a_failure(tmp_path, monkeypatch):
    """Checked with os.access on the nearest existing folder (faked: root may write
    anywhere); exit 1 (PairkitError), not usage."""
    import pairkit.core.paths as paths

    denied = tmp_path / "ro"
    denied.mkdir()
    real_access = paths.os.access
    monkeypatch.setattr(paths.os, "access",
                        lambda p, mode: Path(p) != denied and real_access(p, mode))
    with pytest.raises(PairkitError, match=f"can't write in {denied} .permission denied"):
        check_output_apart(denied / "new" / "t.parquet", [])
    check_output_apart(tmp_path / "t.parquet", [])


def test_stdout_is_never_the_same_file_as_a_file_named_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not same_file("-", "./-") and not same_file("./-", "-")
    assert same_file("./x.json", "x.json")
