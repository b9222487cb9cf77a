"""pairkit demo: sample data with planted copies, and the whole pipeline end to end."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.demo import make_demo_images

runner = CliRunner()


def test_demo_images_planted_copies_and_split(tmp_path):
    made = make_demo_images(tmp_path / "images", limit=120, test_root=tmp_path / "test",
                            test_fraction=0.25, seed=1)
    assert made.images == 90 and made.test_images == 30
    assert sum(made.duplicates.values()) == len(made.planted) >= 3
    train = {p.name for p in (tmp_path / "images").rglob("digit-*.png")}
    test = {p.name for p in (tmp_path / "test").rglob("digit-*.png")}
    assert not train & test
    for copy, original, edit in made.planted:
        a = np.asarray(Image.open(tmp_path / "images" / original).convert("L"), dtype=float)
        b = Image.open(tmp_path / "images" / copy).convert("L")
        if edit == "resize":
            assert b.size[0] < a.shape[1]
        b = np.asarray(b.resize(a.shape[::-1]), dtype=float)
        assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.9  # still the same picture
    assert (tmp_path / "images" / "0" / "empty.png").stat().st_size == 0


def test_demo_runs_the_pipeline(tmp_path):
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo", str(out), "--limit", "240", "--epochs", "2"])
    assert result.exit_code == 0, result.output
    for name in ("store", "test-store", "duplicates.csv", "pairs-naive.parquet",
                 "pairs.parquet", "head", "eval.json"):
        assert (out / name).exists(), name
    assert "$ pairkit embed" in result.output and "$ pairkit eval" in result.output
    # found by a bug hunt (2026-12-06): the printed commands could not be rerun as printed
    # (outputs existed: no --force; eval's JSON went to the terminal, not eval.json)
    lines = [x[2:] for x in result.output.splitlines() if x.startswith("$ pairkit ")]
    assert all("--force" in x for x in lines if not x.startswith("pairkit embed")), lines
    shown = next(x for x in lines if x.startswith("pairkit eval"))
    assert shown.endswith(f"--force > {out / 'eval.json'}"), shown
    import shlex

    before = (out / "duplicates.csv").read_bytes()
    dedup = shlex.split(next(x for x in lines if x.startswith("pairkit dedup")))[1:]
    assert runner.invoke(app, dedup).exit_code == 0  # rerun by hand as printed
    assert (out / "duplicates.csv").read_bytes() == before
    assert "naive top-k" in result.output
    evaluation = json.loads((out / "eval.json").read_text())
    assert set(evaluation) == {"raw", "head"}
    from pairkit.core.store import Store

    errors = Store.open(out / "store").read_errors()
    assert len(errors) == 3  # the three planted broken files
    # the report, and the last line names the file to open
    index = out / "report" / "index.html"
    assert index.is_file() and any((out / "report" / "t").iterdir())
    assert result.output.strip().splitlines()[-1].startswith(f"open {index} in a browser")


def test_demo_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = runner.invoke(app, ["demo", str(tmp_path)])
    assert result.exit_code == 1 and "not empty" in result.output
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_gain_verdict_says_plainly_whether_the_head_helped() -> None:
    from pairkit.demo import gain_verdict

    assert gain_verdict(0.80, 0.83).startswith("the label-free loop helped: held-out kNN "
                                               "top-1 0.800 -> 0.830 (+0.030)")
    assert gain_verdict(0.929, 0.910).startswith("no gain: the head is worse")
    assert "-0.019" in gain_verdict(0.929, 0.910)
    assert gain_verdict(0.80, 0.803).startswith("no gain: the head ties")
    # a tie that rounds to the noise bound at 3 decimals shows the 4th: the demo printed
    # "(0.929 -> 0.933, +0.005, within 0.005)", a gain of 0.0046 that read as its bound
    assert gain_verdict(0.9286, 0.9332).endswith("(0.929 -> 0.933, +0.0046, within 0.005)")
    assert gain_verdict(0.9332, 0.9286).endswith("(0.933 -> 0.929, -0.0046, within 0.005)")
    assert gain_verdict(None, 0.8).startswith("no held-out kNN top-1")


def test_demo_says_when_limit_is_above_the_digits(tmp_path):
    """Found by a bug hunt (2026-12-06): --limit 100000 wrote the 1,797 digits there are
    without a word; it says the limit was above them."""
    r = runner.invoke(app, ["demo", str(tmp_path / "d"), "--images-only", "--limit", "100000"])
    assert r.exit_code == 0, r.output
    assert "--limit 100000 is more than the 1797 digits there are: all 1797 used" in r.stderr


def test_the_epochs_default_is_one_number():
    """``check_demo_options`` refuses --epochs away from DEMO_EPOCHS with --images-only:
    the command's default must be that number."""
    from typer.main import get_command

    from pairkit.demo import DEMO_EPOCHS

    params = {p.name: p for p in get_command(app).commands["demo"].params}
    assert params["epochs"].default == DEMO_EPOCHS



def test_demo_quiet_prints_nothing_on_success(tmp_path, monkeypatch):
    """``-q`` is quiet as every command's (docs/development.md): no steps, no summary; each
    step gets its own ``-q``. The steps are stubbed (the whole run is the test above).
    Failed before: the summary lines and the last ``open ...`` line were printed."""
    import pairkit.cli.demo as demo_cli

    ran = []

    def step(args, capture):  # noqa: ANN001, ANN202 - _run_step's stand-in
        ran.append(args)
        return 0, "{}" if capture else ""

    monkeypatch.setattr(demo_cli, "_run_step", step)
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo", str(out), "--limit", "100", "-q"])
    assert (result.exit_code, result.output) == (0, ""), result.output
    assert ran and all("-q" in args or "--quiet" in args for args in ran)
    assert [args[0] for args in ran][-1] == "report"
