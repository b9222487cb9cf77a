"""docs/formats.md's manifest table says which writer sets each key: a store made by
``embed``, ``import`` or ``project`` holds exactly the keys documented for its writer.

Found by a bug hunt (hunt-l 11): the table listed ``embedding``, ``seed``, ``labels`` and
``last_run`` as every store's, so a reader of an ``import`` store following it
(``m["labels"]``) got a KeyError; and ``project`` wrote an undocumented ``projected``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.cli.test_eval import write_head

runner = CliRunner()
FORMATS = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def documented_keys() -> dict[str, tuple[set[str], set[str]]]:
    """writer -> (the keys it always sets, the keys it may set) by formats.md's table."""
    text = FORMATS.read_text()
    table = text[text.index("`manifest.json` (format 2)"):]
    table = table[:table.index("\n\n", table.index("| key |"))]
    header, _, *rows = [r for r in table.splitlines() if r.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")][:2] == ["key", "written by"]
    out: dict[str, tuple[set[str], set[str]]] = {w: (set(), set())
                                                 for w in ("embed", "import", "project")}
    for row in rows:
        keys_cell, by = [c.strip() for c in row.strip("|").split("|")][:2]
        keys = set(re.findall(r"`([a-z_0-9]+)`", keys_cell))
        for part in by.split(";"):
            writers = set(re.findall(r"\b(all|embed|import|project)\b", part))
            for w in out if "all" in writers else writers:
                out[w][1 if "when" in part else 0].update(keys)
    return out


def test_each_writer_sets_the_manifest_keys_documented_for_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = tmp_path / "img" / "cat"
    images.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(
            images / f"{i}.png")
    np.save(tmp_path / "x.npy", rng.normal(size=(3, 4)).astype(np.float32))
    pd.DataFrame({"path": ["a.png", "b.png", "c.png"], "label": ["x", "y", "x"]}).to_csv(
        tmp_path / "items.csv", index=False)
    write_head(tmp_path / "head", np.eye(4, dtype=np.float32))
    runs = {"embed": ["embed", str(tmp_path / "img"), "-o", str(tmp_path / "embed"),
                      "--model", "pixels", "-q"],
            "import": ["import", str(tmp_path / "x.npy"), "--items",
                       str(tmp_path / "items.csv"), "-o", str(tmp_path / "import"), "-q"],
            "project": ["project", str(tmp_path / "import"), "--head",
                        str(tmp_path / "head"), "-o", str(tmp_path / "project"), "-q"]}
    docs = documented_keys()
    for writer, args in runs.items():
        r = runner.invoke(app, args)
        assert r.exit_code == 0, (writer, r.output)
        keys = set(json.loads((tmp_path / writer / "manifest.json").read_text()))
        always, maybe = docs[writer]
        assert always <= keys, (writer, always - keys)
        assert keys <= always | maybe, (writer, keys - always - maybe)
    projected = json.loads((tmp_path / "project" / "manifest.json").read_text())["projected"]
    for key in ("from_store", "from_content_id", "weights_sha256", "complete"):
        assert key in projected and f"`{key}`" in FORMATS.read_text(), key
