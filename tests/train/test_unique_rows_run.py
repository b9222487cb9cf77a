"""A training run from a mined table (mined positives, flagged false negatives, pair
whitening, a validation split) is bit-identical whether its (anchor, positive[, negative])
rows are made distinct by :func:`pairkit.core.unique.unique_rows` or by numpy's
``np.unique(axis=0)`` (which it replaced for speed): same head, same log, same config."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.train import data, pair_whitening, positives, train_negatives
from pairkit.train.command import train_to_files
from pairkit.train.config import TrainConfig
from tests.conftest import random_store

FAST = {"epochs": 2, "batch_size": 16, "head": "mlp", "out_dim": 8, "device": "cpu"}


def numpy_unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    uniq, index, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return uniq, index, inverse.reshape(-1)


def outputs(head) -> tuple[bytes, list[dict], dict]:
    log = [json.loads(x) for x in (head / "train_log.jsonl").read_text().splitlines() if x]
    for r in log:  # wall-clock fields differ between any two runs
        for k in [k for k in r if k == "seconds" or "time" in k or k.endswith("_s")]:
            r.pop(k)
    config = json.loads((head / "config.json").read_text())
    return (head / "head.safetensors").read_bytes(), log, config["pairs"]


@pytest.mark.parametrize("fn_mode", ["eliminate", "attract"])
def test_run_is_identical_with_numpy_unique(tmp_path, monkeypatch, fn_mode) -> None:
    store = random_store(tmp_path / "store", n_sources=40, views=2, dim=12, classes=4)
    table = tmp_path / "pairs.parquet"
    r = CliRunner().invoke(app, ["mine", str(store.root), "--hard", "-k", "4",
                                 "--filter-false-negatives", "-o", str(table), "-q"])
    assert r.exit_code == 0, r.output
    cfg = TrainConfig(pair_whitening=4, val_fraction=0.2, fn_mode=fn_mode, **FAST)
    train_to_files(store.root, tmp_path / "new", cfg, pairs=str(table))
    for module in (data, pair_whitening, positives, train_negatives):
        monkeypatch.setattr(module, "unique_rows", numpy_unique_rows)
    train_to_files(store.root, tmp_path / "old", cfg, pairs=str(table))
    new, old = outputs(tmp_path / "new"), outputs(tmp_path / "old")
    assert new[0] == old[0]
    assert new[1] == old[1] and len(new[1]) == 2
    assert new[2] == old[2] and new[2]["mined_positives"] > 0
