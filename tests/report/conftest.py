"""A small real pipeline (embed -> dedup -> mine -> eval) whose outputs the report reads."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import make_images

runner = CliRunner()


def pk(*args: object):  # noqa: ANN201
    """Run one pairkit command in-process; fail the test with its output on error."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@dataclass
class Pipeline:
    root: Path
    images: Path
    store: Path
    pairs: Path  # triplet, flags kept
    ntuple: Path
    labeled: Path
    plain: Path  # triplet without flag columns
    duplicates: Path
    eval_json: Path
    plots: Path


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    root = tmp_path_factory.mktemp("report-pipeline")
    images = root / "images"
    make_images(images, n_per_class=4, classes=4, size=40)
    # a planted copy so dedup has a group
    shutil.copyfile(images / "class0" / "img0.jpg", images / "class0" / "copy.jpg")
    store = root / "store"
    pk("embed", images, "-o", store, "--model", "fake", "--views", "2", "--labels", "folder",
       "--quiet")
    flags = ["--hard", "--relation", "instance", "--filter-false-negatives", "--fn-mode", "keep",
             "-k", "8", "-q"]
    p = Pipeline(root, images, store, root / "pairs.parquet", root / "ntuple.jsonl",
                 root / "labeled.csv", root / "plain.parquet", root / "duplicates.csv",
                 root / "eval.json", root / "plots")
    pk("mine", store, *flags, "-o", p.pairs)
    pk("mine", store, *flags, "--format", "n-tuple", "-o", p.ntuple)
    pk("mine", store, *flags, "--format", "labeled-pair", "-o", p.labeled)
    pk("mine", store, "--hard", "-k", "3", "-q", "-o", p.plain)
    pk("dedup", store, "-o", p.duplicates, "-q")
    result = pk("eval", store, "--json", "-q", "--plot", p.plots, "--knn-k", "3")
    p.eval_json.write_text(result.stdout.strip().splitlines()[-1], encoding="utf-8")
    return p
