"""Bad values are bad usage (exit 2, one line, nothing written), in one style; refusals come
before heavy imports; a closed stdout ends a command quietly (issue 20.11-20.13)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import random_store
from tests.proc import REPO, child_env, error_lines, exit_codes_in_one_child

runner = CliRunner()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("usage") / "store", n_sources=20, views=2)


def cases(store: str, out: str) -> list[tuple[list[str], str]]:
    train = ["train", store, "-o", out + "/h", "--relation", "instance"]
    return [
        (["mine", store, "--hard", "--seed", "-1"], "--seed must be >= 0, got -1"),
        ([*train, "--out-dim", "0"], "--out-dim must be >= 1, got 0"),
        ([*train, "--hidden", "0"], "--hidden must be >= 1, got 0"),
        (["eval", store, "--knn-k", "0"], "--knn-k values must be >= 1, got 0"),
        # mutation audit 5b (EV4): 0 queries per search block
        (["eval", store, "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        # mutation audit 5b: project's 0 rows per forward pass was a failure (exit 1)
        (["project", store, "--head", out + "/h", "-o", out + "/p", "--batch-size", "0"],
         "--batch-size must be >= 1, got 0"),
        (["demo", out + "/d", "--limit", "0"], "--limit must be >= 100, got 0"),
        (["demo", out + "/d", "--limit", "-3"], "--limit must be >= 100, got -3"),
        (["demo", out + "/d", "--limit", "5"], "--limit must be >= 100, got 5"),
        (["mine", store, "--hard", "--min-score", "nan"], "--min-score must be a number, got nan"),
        (["mine", store, "--hard", "--max-score", "nan"], "--max-score must be a number, got nan"),
        # mutation audit 4a (OP5): an infinite bound is no number either (min-score inf: no
        # negative at all, every anchor "short")
        (["mine", store, "--hard", "--min-score", "inf"], "--min-score must be a number, got inf"),
        (["mine", store, "--hard", "--max-score", "-inf"],
         "--max-score must be a number, got -inf"),
        (["mine", store, "--hard", "--absolute-margin", "nan"],
         "--absolute-margin must be a number, got nan"),
        (["mine", store, "--hard", "--exact-max-rows", "-5"],
         "--exact-max-rows must be >= 0, got -5"),
        (["mine", store, "--hard", "--nprobe", "0"], "--nprobe must be >= 1, got 0"),
        (["index", store, "--nprobe", "0"], "--nprobe must be >= 1, got 0"),
        # found by a CLI bug hunt (2026-12-06): 1 and 0 killed the process in FAISS
        (["index", store, "--index", "hnsw", "--hnsw-m", "1"], "--hnsw-m must be >= 2, got 1"),
        # ... and a repeated k counted its hits twice (kNN top-5 1.65), "" meant all
        (["eval", store, "--knn-k", "5,5"], "--knn-k lists 5 twice"),
        (["eval", store, "--recall-k", "1,2,1"], "--recall-k lists 1 twice"),
        (["eval", store, "--metrics", ""], "--metrics must not be empty"),
        # ... options that did nothing, and a text file named like a table
        (["mine", store, "--hard", "--positive-neighbours", "3"],
         "--positive-neighbours applies to mined positives, and this run mines none "
         "(no --filter-false-negatives)"),
        (["mine", store, "--hard", "--filter-false-negatives", "--positives", "0",
          "--positive-whitening", "0.5"], "--positive-whitening applies to mined positives"),
        (["dedup", store, "--paths-only", "-o", out + "/drop.parquet"],
         "--paths-only writes plain lines, not a table"),
        ([*train, "--loss", "triplet", "--symmetric"],
         "--symmetric applies to --loss infonce, debiased or hard, not triplet"),
        ([*train, "--lr", "nan"], "--lr must be a number, got nan"),
        # options the chosen loss, head or mode never reads were accepted and recorded
        ([*train, "--margin", "0.5"], "--margin applies to --loss triplet, not infonce"),
        ([*train, "--loss", "supcon", "--tau-plus", "0.2"],
         "--tau-plus applies to --loss debiased or hard, not supcon"),
        ([*train, "--loss", "debiased", "--beta", "2"],
         "--beta applies to --loss hard, not debiased"),
        ([*train, "--loss", "triplet", "--keep-input", "0", "--temperature", "0.2"],
         "--temperature applies to every loss but triplet and to --keep-input, and this "
         "run has neither"),
        ([*train, "--keep-input", "0", "--keep-input-temperature", "0.1"],
         "--keep-input-temperature applies to --keep-input, which is 0 (off)"),
        ([*train, "--head", "linear", "--hidden", "64"],
         "--hidden applies to residual and mlp heads, not linear"),
        ([*train, "--positive-share", "0.8"],
         "--positive-share applies to a --pairs table's mined positives"),
        ([*train, "--positive-sampling", "confidence"],
         "--positive-sampling applies to a --pairs table's mined positives"),
        ([*train, "--mined-view", "row"],
         "--mined-view applies to a --pairs table's mined positives"),
        ([*train, "--fn-mode", "attract"],
         "--fn-mode applies to a --pairs table's false_negative flags"),
        (["dedup", store, "--keep", "biggest"],
         "--keep: 'biggest' is not one of 'best', 'first', 'largest', 'central'"),
        (["mine", store, "--hard", "--index", "annoy"], "--index: 'annoy' is not one of"),
        (["mine", store, "--nosuch"], "no such option: --nosuch"),
        # found by a docs hunt (hunt-c): these three exited 1
        (["train", store, "-o", out + "/h", "--relation", "bogus"],
         "--relation must be one of instance, label, got bogus"),
        ([*train, "--head", "residual", "--out-dim", "8"],
         "a residual head keeps the input dim (16): --out-dim 8 needs --head mlp or linear"),
        (["embed", store, "-o", out + "/e", "--model", "pixels", "--image-size", "32"],
         "--image-size does not apply to --model pixels (its features are computed at 64 px)"),
        # found by a mine bug hunt (2026-12-06): seeds above 64 bits were taken (and mine's
        # were cut to 32 bits); FAISS's k-means seed is a 32-bit int (an internal error)
        (["mine", store, "--seed", str(2**63)], "--seed must be < 2**63, got"),
        (["index", store, "--index", "ivf", "--seed", str(2**31)],
         "--seed must be < 2**31 for an IVF index"),
        (["mine", store, "--hard", "--filter-false-negatives", "--fn-cluster-votes", "0"],
         "--fn-cluster-votes must be >= 1, got 0"),
        (["mine", store, "--hard", "--sampling-temperature", "0.1"],
         "--sampling-temperature applies to --sampling softmax"),
        (["mine", store, "--hard", "--index", "flat", "--nlist", "4"],
         "--nlist applies to --index ivf or ivfpq (or auto), not flat"),
        (["mine", store, "--hard", "--index", "ivf", "--ef-search", "4"],
         "--ef-search applies to --index hnsw (or auto), not ivf"),
        (["mine", store, "--hard", "--filter-false-negatives", "--fn-rules", "margin",
          "--fn-cluster-k", "3"], "--fn-cluster-k applies to the cluster rule, which "
         "--fn-rules leaves out"),
        (["mine", store, "--hard", "--filter-false-negatives", "--fn-rules", "cluster",
          "--fn-margin", "0.9"], "--fn-margin applies to the margin rule"),
        # found by a read-through (2026-12-06): an unknown model name was exit 1
        (["embed", store, "-o", out + "/e", "--model", "nosuch"],
         "unknown model 'nosuch': did you mean timm/nosuch?"),
        # found by a bug hunt (2026-12-06): a timm tag beside --checkpoint was an internal
        # error (a bad tag) or ignored but recorded (a good one); pixels recorded a tag
        (["embed", store, "-o", out + "/e", "--model", "timm/test_vit", "--checkpoint",
          out + "/good.pt", "--pretrained", "bogus"],
         "--pretrained and --checkpoint exclude each other (the checkpoint gives the weights)"),
        # (an open_clip tag beside --checkpoint names the preprocessing since hunt-u 3;
        # random weights beside a checkpoint are still refused)
        (["embed", store, "-o", out + "/e", "--model", "openclip/ViT-B-32", "--checkpoint",
          out + "/good.pt", "--pretrained", "none"],
         "--pretrained and --checkpoint exclude each other"),
        (["embed", store, "-o", out + "/e", "--model", "pixels", "--pretrained",
          "laion2b_s34b_b79k"], "--pretrained does not apply to --model pixels (it has no "
                                "weights)"),
        # found by a bug hunt (hunt-s 11): the "..." eaten, a folder named "-", options
        # accepted and ignored
        (["info", store, "--threads", "2"],
         "--threads is an option of pairkit itself: pairkit --threads N COMMAND ..."),
        (["demo", "-", "--images-only", "--limit", "100"],
         "demo -: its files go in a folder; - (stdout) is for tables: name a folder"),
        (["demo", out + "/d", "--images-only", "--epochs", "3"],
         "--epochs applies to the whole demo, not --images-only (no head is trained)"),
        (["search", store, "1", "--checkpoint", out + "/w.pt"],
         "--checkpoint applies to image and text queries (the store's encoder), not to item "
         "ids"),
    ]


def test_bad_values_are_one_line_usage_errors(store, tmp_path: Path) -> None:
    """Issue 20.11: these were internal errors (exit 1), accepted and meaningless (NaN, 0
    probes, negative row caps), or Click's four-line block beside pairkit's one line."""
    for args, message in cases(str(store.root), str(tmp_path)):
        r = runner.invoke(app, args)
        lines = error_lines(r.stderr)
        assert r.exit_code == 2, (args, r.output)
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, lines)
        assert message in lines[0], (args, lines)
        assert "internal error" not in r.output and "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # demo left no folder


def test_a_missing_argument_or_option_is_named(store, tmp_path: Path) -> None:
    """Found by a bug hunt (hunt-s 3): these printed "error: " and nothing else."""
    s, t = str(store.root), str(tmp_path)
    for args, message in (
            (["embed", t], "error: missing option '-o' / '--output'"),
            (["mine", "--hard"], "error: missing argument 'STORE'"),
            (["import", t + "/e.npy", "-o", t + "/x"], "error: missing option '--items'"),
            (["project", s, "-o", t + "/x"], "error: missing option '--head'"),
            (["info", "--json"], "error: missing argument 'STORE'"),
            (["demo", "--limit", "100"], "error: missing argument 'DIRECTORY'")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert error_lines(r.stderr) == [message], (args, r.stderr)


def test_an_empty_path_is_refused_naming_it(store, tmp_path: Path) -> None:
    """Found by a bug hunt (hunt-s 2): ``Path("")`` is the current folder: ``embed ""``
    embedded the working directory, the others spoke of "." or a blank name."""
    s, t = str(store.root), str(tmp_path)
    runs = [
        (["embed", "", "-o", t + "/e", "--model", "pixels"], "IMAGES"),
        (["embed", t, "-o", "", "--model", "pixels"], "--output"),
        (["embed", t, "-o", t + "/e", "--labels", ""], "--labels"),
        (["import", "", "--items", t + "/i.csv", "-o", t + "/i"], "EMBEDDINGS"),
        (["train", s, "--pairs", "", "-o", t + "/h"], "--pairs"),
        (["train", s, "--relation", "instance", "-o", ""], "--output"),
        (["report", "", "-o", t + "/r"], "INPUT"),
        (["eval", s, "--plot", ""], "--plot"),
        (["eval", s, "--head", ""], "--head"),
        (["search", s, ""], "QUERY"),
        (["search", s, "1", "--checkpoint", ""], "--checkpoint"),
        (["info", ""], "STORE"),
        (["mine", s, "-o", ""], "--output"),
        (["mine", s, "-o", t + "/m.csv", "--stats", ""], "--stats"),
        (["dedup", s, "--against", ""], "--against"),
        (["demo", ""], "DIRECTORY"),
    ]
    for args, name in runs:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert error_lines(r.stderr) == [
            f"error: {name}: an empty path (an unset shell variable?)"], (args, r.stderr)
    codes, heavy, _ = exit_codes_in_one_child([a for a, _ in runs])
    assert set(codes) == {2} and heavy == []
    assert list(tmp_path.iterdir()) == []


def test_pixel_threshold_without_the_pixel_check_is_refused(store, tmp_path: Path) -> None:
    """Found by a CLI bug hunt (2026-12-06): ``--pixel-threshold`` was ignored where dedup
    compares embeddings (no images, --method threshold, --threshold)."""
    for extra, why in (([], "the store's images can't be read"),
                       (["--method", "threshold"], "--method threshold"),
                       (["-t", "0.9"], "--threshold is given")):
        r = runner.invoke(app, ["dedup", str(store.root), "--pixel-threshold", "0.9", *extra])
        lines = error_lines(r.stderr)
        assert r.exit_code == 2, r.output
        assert lines == [f"error: --pixel-threshold applies to the pixel check, and this run "
                         f"compares embeddings ({why})"], lines


def test_index_options_the_store_cannot_take_are_usage_errors(store) -> None:
    """Found by a CLI bug hunt (2026-12-06): --pq-m that does not divide the dim exited 1."""
    r = runner.invoke(app, ["index", str(store.root), "--index", "ivfpq", "--pq-m", "3"])
    assert r.exit_code == 2, r.output
    assert error_lines(r.stderr) == ["error: --pq-m must divide the store dim 16, got 3"]


def test_usage_errors_come_before_heavy_imports(store, tmp_path: Path) -> None:
    runs = [args for args, _ in cases(str(store.root), str(tmp_path))]
    codes, heavy, stderr = exit_codes_in_one_child(runs)
    assert set(codes) == {2}, stderr
    assert heavy == [], heavy


def test_a_closed_stdout_ends_quietly(store) -> None:
    """Issue 20.12: `pairkit mine st --hard | head -1` exited 1 with an empty stderr."""
    for args in (["mine", str(store.root), "--hard", "-q"],
                 ["dedup", str(store.root), "-t", "0.5", "-q"],
                 ["issues", str(store.root), "--all", "-q"]):
        proc = subprocess.Popen([sys.executable, "-m", "pairkit", *args], cwd=REPO,
                                env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        first = proc.stdout.readline()
        proc.stdout.close()  # what `| head -1` does after its line
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0, err
        assert first.startswith(b"{") and err == ""


def test_a_closed_stderr_does_not_stop_the_work(store, tmp_path: Path) -> None:
    """Found by a bug hunt (hunt-s 1): `pairkit train ... 2>&1 | head -1` stopped at the
    next line on stderr: exit 1, no message, a head folder with complete false."""
    import json

    head = tmp_path / "head"
    proc = subprocess.Popen([sys.executable, "-m", "pairkit", "train", str(store.root), "-o",
                             str(head), "--relation", "instance", "--epochs", "4",
                             "--out-dim", "4"], cwd=REPO, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = proc.stderr.readline()
    proc.stderr.close()  # what `2>&1 | head -1` does after its line
    assert proc.wait(timeout=180) == 0
    assert first.startswith(b"epoch 1"), first
    assert json.loads((head / "config.json").read_text())["complete"] is True
    assert len((head / "train_log.jsonl").read_text().splitlines()) == 4


def test_slow_refusals_come_before_heavy_imports(store, tmp_path: Path) -> None:
    """Issue 20 ("slow to say no"): these took 4-7 s, torch's import time, to refuse."""
    from pairkit.core.devices import no_gpu_at_all
    from tests.conftest import make_images

    head = tmp_path / "head"
    r = runner.invoke(app, ["train", str(store.root), "-o", str(head), "--relation", "instance",
                            "--epochs", "1", "--out-dim", "4", "-q"])
    assert r.exit_code == 0, r.output
    images = tmp_path / "images"
    make_images(images, n_per_class=2, classes=2)
    embedded = tmp_path / "embedded"
    assert runner.invoke(app, ["embed", str(images), "-o", str(embedded), "--model", "pixels",
                               "-q"]).exit_code == 0
    s, t = str(store.root), str(tmp_path)
    runs = [
        (["train", s, "-o", str(head), "--relation", "instance"], 1, "exists; pass --force"),
        (["eval", s, "--head", t + "/nosuch"], 1, "not found"),
        (["project", s, "--head", s, "-o", t + "/p"], 1, "is not a pairkit head"),
        (["project", s, "--head", str(head), "-o", s], 2, "is the input"),
        (["embed", str(images), "-o", t + "/e", "--model", "ViT-B-32"], 2,
         "did you mean openclip/ViT-B-32?"),
        (["embed", str(images), "-o", str(embedded), "--model", "pixels"], 0, ""),
    ]
    if no_gpu_at_all():
        runs += [(["embed", str(images), "-o", t + "/e", "--model", "pixels", "--device",
                   "cuda"], 1, "no CUDA GPU is visible"),
                 (["train", s, "-o", t + "/h2", "--relation", "instance", "--device", "cuda"],
                  1, "no CUDA GPU is visible")]
    codes, heavy, stderr = exit_codes_in_one_child([a for a, _, _ in runs])
    assert codes == [c for _, c, _ in runs], stderr
    for _, _, message in runs:
        assert message in stderr
    assert heavy == [], heavy


@pytest.mark.parametrize("args, message", [
    (["search", "{s}", "{t}/q.png"], "store {s} was not made by pairkit embed"),
    (["search", "{s}", "1", "--text", "x"], "store {s} was not made by pairkit embed"),
    (["eval", "{s}", "--test-fraction", "2"], "--test-fraction must be > 0 and < 1, got 2.0"),
    (["issues", "{s}", "--checks", "bogus"], "--checks: unknown check 'bogus'"),
    (["issues", "{s}", "--k", "0"], "--k must be >= 1, got 0"),
    (["dedup", "{s}", "--pixel-threshold", "2"], "--pixel-threshold must be in (-1, 1], got 2"),
])
def test_refusals_that_read_the_store_come_before_torch_and_pandas(store, tmp_path: Path,
                                                                   args, message) -> None:
    """Found by a bug hunt (hunt-s 8): the search refusals imported torch first (3.6-6 s
    of CPU), the others pandas (about 1 s)."""
    s, t = str(store.root), str(tmp_path)
    (tmp_path / "q.png").write_bytes(b"not read")
    args = [a.format(s=s, t=t) for a in args]
    codes, heavy, stderr = exit_codes_in_one_child([args], modules=("torch", "pandas"))
    assert codes == [2], stderr
    assert error_lines(stderr)[0].startswith(f"error: {message.format(s=s)}"), stderr
    assert heavy == [], heavy


def test_a_bad_device_names_the_option_once_in_every_command(store, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): "error: --device: --device must be auto, cpu,
    cuda or cuda:N, got 'foo'" (the check's message names the option, Click's hint
    named it again). Every command with --device says it once, exit 2."""
    s, t = str(store.root), str(tmp_path)
    commands = [["eval", s], ["mine", s, "--hard"], ["dedup", s], ["embed", t, "-o", t + "/e"],
                ["project", s, "--head", t, "-o", t + "/p"], ["search", s, "x"],
                ["train", s, "-o", t + "/h", "--relation", "instance"]]
    for args in commands:
        r = runner.invoke(app, [*args, "--device", "foo"])
        assert r.exit_code == 2, (args, r.output)
        assert error_lines(r.stderr) == [
            "error: --device must be auto, cpu, cuda or cuda:N, got 'foo'"], (args, r.stderr)
    # a message that does not name its option still gets it
    r = runner.invoke(app, ["dedup", s, "--keep", "biggest"])
    assert error_lines(r.stderr)[0].startswith("error: --keep: 'biggest' is not one of")


def test_a_pair_table_with_triplet_and_n_tuple_negatives_is_refused_as_ambiguous(
        store, tmp_path: Path) -> None:
    """Found by a bug hunt: a table with both a negative_id column and negative_id_1..N
    columns was read as a triplet table (the n-tuple columns silently ignored) by train,
    report and PairImages; it is refused in one line (exit 2) wherever pair tables are
    read."""
    import pandas as pd

    from pairkit.errors import UsageError
    from pairkit.train.pair_data import pair_examples
    from tests.train.helpers import instance_triplets

    table = instance_triplets(store, k=2)
    table["negative_id_1"] = table["negative_id"]
    table["negative_id_2"] = -1
    table.to_csv(tmp_path / "mixed.csv", index=False)
    table.to_parquet(tmp_path / "mixed.parquet", index=False)
    want = ("error: pair table has both negative_id (triplet) and negative_id_1.. (n-tuple) "
            "columns, so which negatives it means is ambiguous: keep one of the two")
    runs = [["train", str(store.root), "--pairs", str(tmp_path / "mixed.csv"), "-o",
             str(tmp_path / "h"), "--epochs", "1", "--device", "cpu"],
            ["report", str(tmp_path / "mixed.csv"), "--store", str(store.root), "-o",
             str(tmp_path / "r1")],
            ["report", str(tmp_path / "mixed.parquet"), "--store", str(store.root), "-o",
             str(tmp_path / "r2")]]
    for args in runs:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert [line for line in r.output.splitlines() if line.strip()] == [want], args
    assert not any((tmp_path / name).exists() for name in ("h", "r1", "r2"))
    with pytest.raises(UsageError, match="ambiguous"):
        pair_examples(pd.read_csv(tmp_path / "mixed.csv"))
