"""Every script in examples/ runs as a user would run it, and does what it says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, work: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # the `pairkit` and `python3` of this interpreter's environment come first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(["bash", str(EXAMPLES / name), str(work)], capture_output=True,
                          text=True, env=env, timeout=600)


def test_every_example_is_tested():
    scripts = {p.name for p in EXAMPLES.glob("*.sh")}
    assert scripts == {"mine_filter_train.sh", "dedup_quarantine.sh",
                       "embed_mine_train_loop.sh"}


def test_dedup_quarantine(tmp_path):
    proc = run_example("dedup_quarantine.sh", tmp_path / "w")
    assert proc.returncode == 0, proc.stderr
    moved = sorted((tmp_path / "w" / "quarantine").rglob("*.*"))
    assert moved, proc.stdout
    planted = (tmp_path / "w" / "planted.csv").read_text().splitlines()[1:]
    pairs = [line.split(",")[:2] for line in planted]
    # each planted pair lost exactly one member to the quarantine, and kept the other
    for copy, original in pairs:
        in_q = [(tmp_path / "w" / "quarantine" / p).exists() for p in (copy, original)]
        in_images = [(tmp_path / "w" / "images" / p).exists() for p in (copy, original)]
        assert sum(in_q) == 1 and sum(in_images) == 1, (copy, original)


def test_mine_filter_train(tmp_path):
    proc = run_example("mine_filter_train.sh", tmp_path / "w")
    assert proc.returncode == 0, proc.stderr
    head = tmp_path / "w" / "head"
    assert (head / "head.safetensors").is_file()
    log = [json.loads(x) for x in (head / "train_log.jsonl").read_text().splitlines()]
    assert len([r for r in log if "epoch" in r]) >= 3


def test_embed_mine_train_loop(tmp_path):
    proc = run_example("embed_mine_train_loop.sh", tmp_path / "w")
    assert proc.returncode == 0, proc.stderr
    assert "knn_top1: raw" in proc.stdout
    assert (tmp_path / "w" / "pairs-2.parquet").is_file()
    projected = json.loads((tmp_path / "w" / "eval-projected.json").read_text())
    assert 0.0 <= projected["knn_top1"] <= 1.0


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sh")))
def test_examples_refuse_missing_argument(script):
    proc = subprocess.run(["bash", str(EXAMPLES / script)], capture_output=True, text=True)
    assert proc.returncode != 0 and "usage" in proc.stderr
