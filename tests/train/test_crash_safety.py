"""train killed while writing config.json (kill -9 in a child), stale temps of killed
runs, and hostile checkpoints refused in one line."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.errors import PairkitError
from pairkit.train.config import TrainConfig
from pairkit.train.head import load_head
from pairkit.train.loop import train_head
from tests.conftest import random_store
from tests.proc import start_python

runner = CliRunner()
FAST = {"batch_size": 16, "head": "mlp", "out_dim": 8, "device": "cpu", "relation": "instance"}

KILL_IN_CONFIG_WRITE = """
import os, signal, sys
from pathlib import Path
from pairkit.core.atomic import atomic_open
from pairkit.core.store import Store
from pairkit.train import epoch_end
from pairkit.train.config import TrainConfig
from pairkit.train.loop import train_head

def killed_while_writing(folder, config):
    with atomic_open(Path(folder) / "config.json") as fh:
        fh.write('{"format": "pairkit-head", "epo')
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)

epoch_end.write_config = killed_while_writing
cfg = TrainConfig(epochs=EPOCHS, batch_size=16, head="mlp", out_dim=8, device="cpu",
                  relation="instance")
train_head(Store.open(STORE), Path(HEAD), cfg)
"""


def kill_during_first_config(store, head, epochs: int) -> None:
    code = (KILL_IN_CONFIG_WRITE.replace("EPOCHS", str(epochs))
            .replace("STORE", repr(str(store.root))).replace("HEAD", repr(str(head))))
    child = start_python(code)
    child.stdin.close()
    assert child.wait(timeout=240) == -9, child.stderr.read()


@pytest.fixture
def store(tmp_path):
    return random_store(tmp_path / "store", n_sources=24, views=2, dim=12, classes=4)


def same_weights(a, b) -> bool:
    wa, wb = load_file(str(a / "head.safetensors")), load_file(str(b / "head.safetensors"))
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_kill_during_config_write_then_resume(store, tmp_path):
    """The probe's state: weights, checkpoint and log but no config.json (and a temp file).
    --resume recognises it from the checkpoint's own fingerprint and trains on, to the
    weights of a run that was never killed."""
    epochs = 2
    head = tmp_path / "head"
    kill_during_first_config(store, head, epochs)
    names = {p.name for p in head.iterdir()}
    assert {"head.safetensors", "checkpoint.pt", "train_log.jsonl"} <= names
    assert "config.json" not in names and any(n.startswith(".config.json.") for n in names)
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o", str(head),
                            "--epochs", str(epochs), "--batch-size", "16", "--head", "mlp",
                            "--out-dim", "8", "--device", "cpu", "--resume", "-q"])
    assert r.exit_code == 0, r.output
    assert not [p for p in head.iterdir() if p.name.endswith(".tmp")]
    config = json.loads((head / "config.json").read_text())
    assert config["epochs_done"] == epochs and config["complete"] is True
    assert load_head(head).complete
    train_head(store, tmp_path / "clean", TrainConfig(epochs=epochs, **FAST))
    assert same_weights(head, tmp_path / "clean")
    assert [json.loads(x)["epoch"] for x in (head / "train_log.jsonl").read_text().splitlines()] \
        == list(range(1, epochs + 1))


def test_resume_finishes_a_head_killed_before_its_last_config(store, tmp_path):
    """Killed after the last epoch's checkpoint, before its config.json: --resume with the
    same --epochs writes the config instead of refusing."""
    head = tmp_path / "head"
    train_head(store, head, TrainConfig(epochs=1, **FAST))
    (head / "config.json").unlink()
    result = train_head(store, head, TrainConfig(epochs=1, **FAST), resume=True)
    assert any("written now" in n for n in result.notes)
    assert load_head(head).complete
    again = train_head(store, head, TrainConfig(epochs=1, **FAST), resume=True)
    assert any("already has its 1 epochs: nothing to do" in n for n in again.notes)


def test_stale_temps_in_a_head_folder_are_removed(store, tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    (head / ".checkpoint.pt.abcd1234.tmp").write_bytes(b"half a checkpoint")
    (head / ".head.safetensors.qwerty12.tmp").write_bytes(b"half")
    train_head(store, head, TrainConfig(epochs=1, **FAST))  # only temps: counts as empty
    assert sorted(p.name for p in head.iterdir()) == sorted(
        ["head.safetensors", "config.json", "train_log.jsonl", "train_plot.png",
         "checkpoint.pt", "whitening.safetensors"])
    (head / ".checkpoint.pt.zzzz9999.tmp").write_bytes(b"half")
    train_head(store, head, TrainConfig(epochs=2, **FAST), resume=True)
    assert not (head / ".checkpoint.pt.zzzz9999.tmp").exists()


class _Evil:
    def __reduce__(self):
        return (print, ("code ran",))


def test_pickled_code_in_a_checkpoint_is_refused_in_one_line(store, tmp_path):
    head = tmp_path / "head"
    train_head(store, head, TrainConfig(epochs=1, **FAST))
    torch.save({"model": _Evil(), "optimizer": {}, "epoch": 1, "step": 1},
               head / "checkpoint.pt")
    with pytest.raises(PairkitError) as info:
        train_head(store, head, TrainConfig(epochs=2, **FAST), resume=True)
    message = str(info.value)
    assert message.startswith(f"--resume: {head / 'checkpoint.pt'} is unreadable: it holds "
                              "pickled Python objects")
    assert "\n" not in message and "weights_only" not in message and "trust" not in message
    with open(head / "checkpoint.pt", "wb") as fh:
        pickle.dump({"model": 1}, fh)
    with pytest.raises(PairkitError, match="is unreadable"):
        train_head(store, head, TrainConfig(epochs=2, **FAST), resume=True)


class _StopAfter1:
    def start(self, *a):
        pass

    def advance(self, *a):
        pass

    def note(self, message):
        pass

    def epoch_done(self, record):
        if record["epoch"] == 1:
            raise KeyboardInterrupt


def test_a_damaged_checkpoint_or_head_config_is_refused_in_one_line(store, tmp_path):
    """Found by a bug hunt (2026-12-06): a checkpoint.pt whose model, epoch or optimizer
    did not fit ended --resume in "internal error" (load_state_dict, int(), KeyError); a
    file that is no torch file was said to hold "pickled Python objects"; a head
    config.json with "in_dim": 12.0 or "hidden": 10**12 ended eval --head / load_head in
    "internal error" (a float size, an allocation of terabytes)."""
    cfg = TrainConfig(epochs=3, **FAST)
    head = tmp_path / "head"
    with pytest.raises(KeyboardInterrupt):
        train_head(store, head, cfg, hook=_StopAfter1())
    good = torch.load(head / "checkpoint.pt", weights_only=True)
    for key, value in (("model", {"x": torch.zeros(2)}), ("epoch", "abc"), ("optimizer", {}),
                       ("step", None), ("epoch", -1)):
        torch.save({**good, key: value}, head / "checkpoint.pt")
        with pytest.raises(PairkitError, match=r"checkpoint.pt is damaged \(") as info:
            train_head(store, head, cfg, resume=True)
        assert "\n" not in str(info.value), key
    (head / "checkpoint.pt").write_bytes(b"garbage\n")
    with pytest.raises(PairkitError) as info:
        train_head(store, head, cfg, resume=True)
    assert "is unreadable" in str(info.value) and "pickled" not in str(info.value)
    torch.save(good, head / "checkpoint.pt")
    train_head(store, head, cfg, resume=True)  # the good checkpoint still resumes
    config = json.loads((head / "config.json").read_text())
    for field, value in (("in_dim", 12.0), ("hidden", 10**12), ("out_dim", True)):
        bad = {**config, "head": {**config["head"], field: value}}
        (head / "config.json").write_text(json.dumps(bad))
        with pytest.raises(PairkitError, match="config.json") as info:
            load_head(head)
        assert "\n" not in str(info.value), field


def test_a_missing_or_damaged_log_is_refused_by_resume_in_one_line(store, tmp_path):
    """Found by a bug hunt (hunt7 3): train --resume over a head whose train_log.jsonl was
    removed ended in "internal error: IndexError: list index out of range" (a complete
    run) or trained on with a log of the new epochs only (an unfinished one), and a log
    line that is no JSON in "internal error: JSONDecodeError". A log that lacks records
    of the checkpoint's epochs is refused in one line, as a damaged checkpoint is."""
    cfg = TrainConfig(epochs=2, **FAST)
    head = tmp_path / "head"
    train_head(store, head, cfg)
    log = (head / "train_log.jsonl").read_text()
    lines = log.splitlines(keepends=True)
    for damaged, more in ((None, 0), ("", 0), ("garbage{\n", 0), (lines[1], 1),
                          (lines[0] + "[1, 2]\n", 1), (log + "{\"loss\": 1}\n", 1)):
        if damaged is None:
            (head / "train_log.jsonl").unlink()
        else:
            (head / "train_log.jsonl").write_text(damaged)
        with pytest.raises(PairkitError, match=r"--resume: .*train_log.jsonl is missing or "
                                               r"damaged") as info:
            train_head(store, head, TrainConfig(epochs=2 + more, **FAST), resume=True)
        assert "\n" not in str(info.value)
    (head / "train_log.jsonl").write_text(log)
    result = train_head(store, head, TrainConfig(epochs=3, **FAST), resume=True)
    assert [r["epoch"] for r in result.records] == [1, 2, 3]


@pytest.mark.parametrize("text, held", [("[]", "a JSON array"), ("7", "a JSON number"),
                                        ('"x"', "a JSON string"), ("null", "JSON null")])
def test_a_config_that_is_no_object_is_refused_by_resume_not_taken_as_lost(
        store, tmp_path, text, held):
    """Found by a bug hunt: a head whose config.json held ``[]`` (not an object) was taken
    by --resume as one whose config was lost (a kill while writing it): 'written now', the
    file replaced. It is refused as malformed, in one line, exit 1 (a damaged file)."""
    head = tmp_path / "head"
    train_head(store, head, TrainConfig(epochs=1, **FAST))
    (head / "config.json").write_text(text)
    r = runner.invoke(app, ["train", str(store.root), "--relation", "instance", "-o", str(head),
                            "--epochs", "1", "--batch-size", "16", "--head", "mlp",
                            "--out-dim", "8", "--device", "cpu", "--resume", "-q"])
    assert r.exit_code == 1, r.output
    assert r.output.strip() == (
        f"error: --resume: {head / 'config.json'} is malformed: it holds {held}, not a "
        "JSON object: rerun without --resume (and with --force)")
    assert (head / "config.json").read_text() == text
