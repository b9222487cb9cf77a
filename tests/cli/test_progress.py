"""Progress of ``dedup``, ``issues``, ``index``, ``report`` and ``eval`` (hunt-r item 8;
before it they printed nothing until they ended, even on a terminal).

Their store-to-files functions take the progress hook mine's takes (``on_start(total)``,
then ``progress(m)``, adding up to the total; ``index`` also ``on_phase(line)``), and
never print. On a pseudo-terminal each command shows the bar (rich, on stderr); with
stderr not a terminal (a pipe, CI logs) and with ``--quiet`` its stderr is what it was:
the summary lines only (no bar, no phase line)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.cli.test_dedup import dup_store
from tests.conftest import random_store
from tests.proc import REPO, child_env
from tests.report.kit import image, image_store

runner = CliRunner()


class Hook:
    def __init__(self) -> None:
        self.starts: list[int] = []
        self.steps: list[int] = []
        self.phases: list[str] = []

    def on_start(self, n: int) -> None:
        self.starts.append(n)

    def progress(self, n: int) -> None:
        assert self.starts, "progress before on_start"
        self.steps.append(n)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("progress")
    images = root / "images"
    paths = [f"p{i}.png" for i in range(10)]
    for i, p in enumerate(paths):
        image(images / p, i)
    image_store(root / "img", paths, [None] * 10, image_root=images)
    table = root / "dups.csv"  # a dedup table over the image store (two groups)
    pd.DataFrame({"group": [0, 0, 1, 1, 1], "id": [0, 1, 2, 3, 4], "path": paths[:5],
                  "keep": [True, False, True, False, False], "similarity": 0.99,
                  "match": "near"}).to_csv(table, index=False)
    random_store(root / "rand", n_sources=30, views=2)
    random_store(root / "rand8", n_sources=7, views=1, dim=8)
    dup_store(root)  # root / "store": 6 sources, c and d one file
    return {"dedup": root / "store", "rand": root / "rand", "img": root / "img",
            "table": table, "rand8": root / "rand8"}


# -- the library functions' hooks ---------------------------------------------------------
def test_dedup_hook_counts_the_searched_sources(stores, tmp_path):
    """6 sources, c and d the same file (one search unit): 5 searched, in one block; the
    table is the one without a hook."""
    from pairkit.mine.dedup import DedupConfig
    from pairkit.mine.dedup_command import dedup_to_files

    cfg = DedupConfig(threshold=0.95, batch_size=2, device="cpu", backend="faiss")
    hook = Hook()
    dedup_to_files(stores["dedup"], str(tmp_path / "a.csv"), cfg, progress=hook.progress,
                   on_start=hook.on_start)
    assert hook.starts == [5] and sum(hook.steps) == 5 and hook.steps == [2, 2, 1]
    dedup_to_files(stores["dedup"], str(tmp_path / "b.csv"), cfg)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_dedup_against_hook_counts_both_stores(stores, tmp_path):
    from pairkit.mine.dedup import DedupConfig
    from pairkit.mine.dedup_command import dedup_to_files

    hook = Hook()
    dedup_to_files(stores["dedup"], str(tmp_path / "a.csv"),
                   DedupConfig(threshold=0.95, device="cpu", backend="faiss"),
                   against=stores["rand8"], progress=hook.progress, on_start=hook.on_start)
    assert hook.starts == [5 + 7] and sum(hook.steps) == 12


def test_dedup_pixels_hook_counts_the_images_read(stores, tmp_path):
    """The pixels method (a store whose images can be read): one advance per source's
    image in its first pass over them, 10 in all; the table is the one without a hook."""
    from pairkit.mine.dedup import DedupConfig
    from pairkit.mine.dedup_command import dedup_to_files

    cfg = DedupConfig(method="pixels", device="cpu", backend="faiss")
    hook = Hook()
    dedup_to_files(stores["img"], str(tmp_path / "a.csv"), cfg, progress=hook.progress,
                   on_start=hook.on_start)
    assert hook.starts == [10] and hook.steps == [1] * 10
    dedup_to_files(stores["img"], str(tmp_path / "b.csv"), cfg)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_issues_hook_counts_the_sources(stores, tmp_path):
    from pairkit.eval.data_issues import IssuesConfig
    from pairkit.eval.issues_command import issues_to_files

    hook = Hook()
    issues_to_files(stores["rand"], str(tmp_path / "a.csv"), IssuesConfig(k=5),
                    progress=hook.progress, on_start=hook.on_start,
                    on_phase=hook.phases.append)
    assert hook.starts == [30] and sum(hook.steps) == 30
    # a line as each detector starts, after the search (hunt-r 8: they were silent)
    assert hook.phases == ["checking outliers among 30 sources",
                           "checking label errors among 30 sources"]
    issues_to_files(stores["rand"], str(tmp_path / "b.csv"), IssuesConfig(k=5))
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_index_hook_counts_the_rows(stores, kind):
    from pairkit.index.command import index_to_files
    from pairkit.index.options import IndexOptions

    opts = IndexOptions(kind=kind, nlist=4 if kind == "ivf" else None)
    hook = Hook()
    line = index_to_files(stores["rand"], opts, force=True,
                          progress=hook.progress, on_start=hook.on_start,
                          on_phase=hook.phases.append)
    assert line.startswith("built ")
    assert hook.starts == [60] and sum(hook.steps) == 60  # 30 sources x 2 views
    assert [p.split()[0] for p in hook.phases] == {"flat": [], "ivf": ["training"],
                                                   "hnsw": ["linking"]}[kind]
    hook = Hook()  # up to date: nothing to do, no hook called
    index_to_files(stores["rand"], opts, progress=hook.progress,
                   on_start=hook.on_start, on_phase=hook.phases.append)
    assert hook.starts == [] and hook.phases == []


def test_report_hook_counts_the_thumbnails(stores, tmp_path):
    from pairkit.report.build import ReportConfig, build_report

    hook = Hook()
    result = build_report(ReportConfig(inputs=(str(stores["table"]),), output=tmp_path / "r",
                                       store=stores["img"]),
                          progress=hook.progress, on_start=hook.on_start,
                          on_phase=hook.phases.append)
    assert result.thumbnails == 5
    assert hook.starts == [5] and hook.steps == [1] * 5
    assert hook.phases == [f"reading {stores['table']}"]  # a large table takes a while


def test_eval_hook_counts_the_queries_of_each_search_pass(stores):
    """30 sources x 2 views, a fifth of the sources held out (6 sources, 12 queries): one
    pass against the references, one among the queries (retrieval's query gallery), each
    in blocks of --batch-size 5; the metrics are those without a hook."""
    from pairkit.eval.command import eval_to_files
    from pairkit.eval.run import EvalConfig, SearchHook

    hook = Hook()
    both = EvalConfig(metrics=("knn", "retrieval"), block_rows=5, gallery="queries")
    got, _ = eval_to_files(stores["rand"], None, both,
                           hook=SearchHook(hook.on_start, hook.progress))
    assert hook.starts == [12, 12] and hook.steps == [5, 5, 2, 5, 5, 2]
    assert got == eval_to_files(stores["rand"], None, both)[0]
    hook = Hook()  # no labelled metric: the unlabelled pass (the hardest negatives' scores)
    eval_to_files(stores["rand"], None, EvalConfig(metrics=("geometry",), block_rows=5,
                                                   collect_scores=True),
                  hook=SearchHook(hook.on_start, hook.progress))
    assert hook.starts == [12] and sum(hook.steps) == 12


def test_eval_hook_says_each_fit_of_the_linear_probe(stores):
    """The probe (hunt-r 8: minutes with many classes, silent): a line per fit, the five
    weight decays of the validated path then the last fit on all training rows; the
    metrics are those without a hook."""
    from pairkit.eval.command import eval_to_files
    from pairkit.eval.linear_probe import DEFAULT_WEIGHT_DECAYS
    from pairkit.eval.run import EvalConfig, SearchHook

    hook = Hook()
    cfg = EvalConfig(metrics=("linear",))
    got, _ = eval_to_files(stores["rand"], None, cfg,
                           hook=SearchHook(hook.on_start, hook.progress, hook.phases.append))
    fits = len(DEFAULT_WEIGHT_DECAYS) + 1
    assert [p.split(" (")[0] for p in hook.phases] == [
        f"linear probe: fit {i} of {fits}" for i in range(1, fits + 1)]
    decays = [f"weight decay {wd:g}," for wd in sorted(DEFAULT_WEIGHT_DECAYS, reverse=True)]
    assert all(d in p for d, p in zip(decays, hook.phases, strict=False))
    (metrics,) = got.values()
    assert f"weight decay {metrics['linear_probe']['weight_decay']:g}," in hook.phases[-1]
    assert got == eval_to_files(stores["rand"], None, cfg)[0]
    one = Hook()  # one decay given: no validation path, one fit
    eval_to_files(stores["rand"], None, EvalConfig(metrics=("linear",),
                                                   probe_weight_decays=(1e-4,)),
                  hook=SearchHook(one.on_start, one.progress, one.phases.append))
    assert [p.split(" (")[0] for p in one.phases] == ["linear probe: fit 1 of 1"]


# -- the command line: a terminal shows the bar, a pipe gets what it got --------------------
def commands(stores: dict[str, Path], out: Path) -> dict[str, list[str]]:
    return {
        "dedup": ["dedup", str(stores["dedup"]), "-t", "0.95", "--method", "threshold",
                  "-o", str(out / "d.csv"), "--force"],
        "issues": ["issues", str(stores["rand"]), "--k", "5", "-o", str(out / "i.csv"),
                   "--force"],
        "index": ["index", str(stores["rand"]), "--index", "ivf", "--nlist", "4", "--force"],
        "report": ["report", str(stores["table"]), "--store", str(stores["img"]), "-o",
                   str(out / "rep"), "--force"],
        "eval": ["eval", str(stores["rand"]), "--metrics", "knn"],
    }


SHOWN = {"dedup": "searching near-duplicates", "issues": "searching neighbours",
         "index": "adding rows", "report": "making thumbnails", "eval": "searching neighbours"}


def on_a_terminal(runs: list[list[str]]) -> str:
    """Run each argument list through pairkit's app in one child whose stderr is a
    pseudo-terminal; what the terminal got."""
    code = ("import sys\nfrom pairkit.cli.main import app\n"
            f"for args in {runs!r}:\n"
            "    try:\n        app(args=args, prog_name='pairkit')\n"
            "    except SystemExit as exc:\n"
            "        assert not exc.code, (args, exc.code)\n")
    master, slave = pty.openpty()
    env = {**child_env(), "TERM": "xterm", "COLUMNS": "160"}
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CI"):
        env.pop(name, None)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child's side closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, stderr=slave,
                          stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=300)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text
    return text


def test_a_terminal_shows_the_bars(stores, tmp_path):
    runs = commands(stores, tmp_path)
    probe = ["eval", str(stores["rand"]), "--metrics", "linear"]
    shown = on_a_terminal(list(runs.values()) + [runs["index"] + ["--quiet"], probe,
                                                 probe + ["--quiet"]])
    for name, text in SHOWN.items():
        assert text in shown, (name, shown)
    assert "training the ivf index's 4 cells" in shown
    assert "checking outliers among 30 sources" in shown  # issues' detectors
    assert f"reading {stores['table']}" in shown  # report's tables
    assert shown.count("linear probe: fit 1 of 6") == 1  # eval's probe (not when quiet)
    assert "rows/s" in shown and "sources/s" in shown and "thumbnails/s" in shown
    assert "queries/s" in shown
    # the quiet run adds no second bar nor phase line
    assert shown.count("training the ivf index") == 1
    assert shown.count("adding rows") >= 1


@pytest.mark.parametrize("name", list(SHOWN))
def test_a_pipe_gets_no_bar(stores, tmp_path, name):
    """stderr not a terminal (CliRunner's): only the summary lines, as before."""
    args = commands(stores, tmp_path)[name]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert SHOWN[name] not in err and "/s" not in err and "training" not in err
    assert "checking" not in err and "reading" not in err  # nor a phase line
    assert "\x1b" not in err  # no terminal control sequence
    lines = err.splitlines()
    if name == "eval":  # the notes and the metrics table only
        assert "kNN top-1" in err and all(line.startswith(("warning:", "┏", "┃", "┡", "│",
                                                           "└")) for line in lines), err
        assert runner.invoke(app, args + ["--quiet"]).stderr == ""
        return
    first = {"dedup": "2 groups: 4 of 6 sources", "index": "built ivf",
             "issues": "2 outliers, 0 label errors among 30 sources",
             "report": "dups.csv: 2 of 2 groups"}[name]
    assert lines and first in lines[0], err
    assert len(lines) == {"dedup": 1, "issues": 1, "index": 1, "report": 3}[name], err
    quiet = runner.invoke(app, args + ["--quiet"])
    assert quiet.exit_code == 0
    assert quiet.stderr == ""  # report's last line too (docs/development.md)


def test_the_epoch_line_names_its_loss_and_gap() -> None:
    """Mutation audit 5b (PL1, PL2): the epoch line says which loss it reports (validation
    or the train pairs') and a gap only when there is a finite one."""
    from pairkit.train.plot import eval_loss_name, gap_text

    assert eval_loss_name("val") == "validation loss"
    assert eval_loss_name("train") == "train-pair loss after the epoch"
    assert gap_text(0.12345) == "0.123" and gap_text(0) == "0.000"
    for none in (None, float("nan"), float("inf")):
        assert gap_text(none) == "n/a (no negatives)"
