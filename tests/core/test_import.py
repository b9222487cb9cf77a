"""pairkit import: embeddings computed elsewhere become a store."""

from __future__ import annotations

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.core.store import Store

runner = CliRunner()


def _write(tmp_path, x, items):
    np.save(tmp_path / "emb.npy", x)
    items.to_csv(tmp_path / "items.csv", index=False)


def test_import_normalises_and_keeps_columns(tmp_path):
    x = np.array([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]], dtype=np.float32)
    items = pd.DataFrame({"path": ["a.jpg", "a.jpg", "b.jpg"], "view": [0, 1, 0],
                          "label": ["cat", "cat", "dog"]})
    _write(tmp_path, x, items)
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s"),
                                 "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert "L2-normalised" in result.output
    store = Store.open(tmp_path / "s")
    np.testing.assert_allclose(store.vectors(), [[0.6, 0.8], [0, 1], [1, 0]], atol=1e-6)
    assert store.labels().tolist() == ["cat", "cat", "dog"]
    assert store.items["view"].tolist() == [0, 1, 0]


def test_import_rejects_nan_rows(tmp_path):
    x = np.ones((4, 3), dtype=np.float32)
    x[2, 1] = np.nan
    x[3, 0] = np.inf
    _write(tmp_path, x, pd.DataFrame({"path": list("abcd")}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1
    assert "2 rows contain NaN or inf (rows 2, 3)" in result.output
    assert not (tmp_path / "s").exists()


def test_import_row_mismatch_and_missing_path(tmp_path):
    _write(tmp_path, np.ones((3, 2), dtype=np.float32), pd.DataFrame({"path": ["a", "b"]}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "has 3 rows but" in result.output
    _write(tmp_path, np.ones((2, 2), dtype=np.float32), pd.DataFrame({"file": ["a", "b"]}))
    result = runner.invoke(app, ["import", str(tmp_path / "emb.npy"), "--items",
                                 str(tmp_path / "items.csv"), "-o", str(tmp_path / "s")])
    assert result.exit_code == 1 and "need a 'path' column" in result.output
