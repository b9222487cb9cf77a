"""A head folder that holds nothing committed (hunt-n 11): a new run whose first save
failed left head.safetensors and train_log.jsonl without checkpoint.pt or config.json,
and the plain rerun was refused ("exists; pass --force") while --resume had nothing to
resume."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.errors import PairkitError
from pairkit.train.config import TrainConfig
from pairkit.train.head import load_head
from pairkit.train.head_folder import check_head_output, json_record
from pairkit.train.loop import train_head
from tests.conftest import random_store

runner = CliRunner()
FAST = {"batch_size": 16, "head": "mlp", "out_dim": 8, "device": "cpu", "relation": "instance"}


@pytest.fixture
def store(tmp_path):  # noqa: ANN001, ANN201
    return random_store(tmp_path / "store", n_sources=24, views=2, dim=12, classes=4)


def uncommitted(head: Path) -> Path:
    """What a failed first save left: weights and log, no checkpoint, no config."""
    head.mkdir()
    (head / "head.safetensors").write_bytes(b"weights of epoch 1")
    (head / "train_log.jsonl").write_text('{"epoch": 1}\n')
    (head / ".checkpoint.pt.abcd1234.tmp").write_bytes(b"half")
    return head


def test_check_head_output_takes_a_folder_with_nothing_committed(tmp_path):
    head = uncommitted(tmp_path / "head")
    names = check_head_output(head, force=False, resume=False)  # no refusal
    assert {"head.safetensors", "train_log.jsonl"} <= names
    with pytest.raises(PairkitError, match="holds no checkpoint.pt"):
        check_head_output(head, force=False, resume=True)
    (head / "config.json").write_text("{}")  # a committed head is refused as before
    with pytest.raises(PairkitError, match="exists; pass --force"):
        check_head_output(head, force=False, resume=False)
    (head / "config.json").unlink()
    (head / "checkpoint.pt").write_bytes(b"x")  # resumable: refused as before
    with pytest.raises(PairkitError, match="exists; pass --force"):
        check_head_output(head, force=False, resume=False)
    (head / "checkpoint.pt").unlink()
    (head / "notes.txt").write_text("mine")  # not pairkit's: still not a head
    with pytest.raises(PairkitError, match="not a pairkit head"):
        check_head_output(head, force=False, resume=False)


def test_a_plain_rerun_replaces_an_uncommitted_head(store, tmp_path):
    head = uncommitted(tmp_path / "head")
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o",
                            str(head), "--epochs", "1", "--batch-size", "16", "--head", "mlp",
                            "--out-dim", "8", "--device", "cpu", "-q"])
    assert r.exit_code == 0, r.output
    assert load_head(head).complete
    assert not [p for p in head.iterdir() if p.name.endswith(".tmp")]


def test_a_failed_first_save_leaves_no_folder(store, tmp_path, monkeypatch):
    """docs/train.md: a new run that fails in its first epoch leaves no folder; a first
    save that failed (a full disk at checkpoint.pt) left weights and log behind."""
    import pairkit.train.epoch_end as epoch_end

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(epoch_end, "save_checkpoint", full)
    head = tmp_path / "head"
    with pytest.raises(OSError, match="No space left"):
        train_head(store, head, TrainConfig(epochs=2, **FAST))
    assert not head.exists()
    monkeypatch.undo()
    train_head(store, head, TrainConfig(epochs=1, **FAST))
    assert load_head(head).complete


def test_force_replacing_a_whitened_head_leaves_none_of_its_files(store, tmp_path):
    """docs/train.md: --force replaces the old head whole; a new run without an output
    whitening leaves no whitening.safetensors of the old one in the folder."""
    head = tmp_path / "head"
    train_head(store, head, TrainConfig(epochs=1, whiten=0.25, **FAST))
    assert (head / "whitening.safetensors").is_file()
    train_head(store, head, TrainConfig(epochs=1, pair_whitening=0, **FAST), force=True)
    assert load_head(head).whitening is None
    # no whitening: format version 1, which pairkits before the output whitening read
    assert json.loads((head / "config.json").read_text())["format_version"] == 1
    assert sorted(p.name for p in head.iterdir()) == sorted(
        ["checkpoint.pt", "config.json", "head.safetensors", "train_log.jsonl"]
        + (["train_plot.png"] if (head / "train_plot.png").exists() else []))


def test_a_log_record_holds_no_nan_or_inf() -> None:
    """A diverged epoch's inf or NaN metric is null in train_log.jsonl (strict JSON)."""
    line = json_record({"epoch": 3, "loss": math.inf, "val": -math.inf, "gap": math.nan,
                        "lr": 0.5})
    assert json.loads(line) == {"epoch": 3, "loss": None, "val": None, "gap": None, "lr": 0.5}
