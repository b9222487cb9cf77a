"""One vocabulary across commands: option names, values, defaults in --help, exit codes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.conftest import random_store
from tests.proc import exit_codes_in_one_child

runner = CliRunner()
PACKAGE = Path(__file__).resolve().parents[2] / "pairkit"
COMMANDS = get_command(app).commands  # type: ignore[attr-defined]


def test_cli_modules_are_short_and_nothing_below_imports_them() -> None:
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        assert len(path.read_text().splitlines()) < 150, path.name
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("pairkit.cli"), (path, node.module)


def test_defaults_are_shown_one_way() -> None:
    """Every default is in Typer's ``[default: ...]``, never in the help text itself."""
    for name, command in COMMANDS.items():
        for param in command.params:
            text = (getattr(param, "help", None) or "").lower()
            assert "default" not in text, (name, param.name, text)


def test_shared_options_have_one_spelling() -> None:
    seen: dict[str, set[str]] = {}
    for name, command in COMMANDS.items():
        for param in command.params:
            for opt in getattr(param, "opts", []):
                seen.setdefault(opt, set()).add(name)
    # where a command computes: --device everywhere it searches or runs torch
    assert {"embed", "mine", "dedup", "train", "project", "eval"} <= seen["--device"]
    assert {"mine", "index"} <= seen["--index"]
    assert {"embed", "import", "project", "mine", "index"} <= seen["--dtype"]
    assert {"mine", "train"} <= seen["--fn-mode"]
    for gone in ("--gpu", "--no-gpu", "--float16", "--keep-flagged", "--kind"):
        assert gone not in seen, gone


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return random_store(tmp_path_factory.mktemp("conv") / "store", n_sources=20, views=2)


def bad_usage_cases(store: str, out: str) -> list[list[str]]:
    return [
        ["embed", out, "-o", out + "/s", "--model", "pixels", "--dtype", "float64"],
        ["embed", out, "-o", out + "/s", "--model", "pixels", "--device", "gpu"],
        ["embed", out, "-o", out + "/s", "--model", "pixels", "--precision", "fp8"],
        ["import", out + "/e.npy", "--items", out + "/i.csv", "-o", out + "/s",
         "--dtype", "float64"],
        ["index", store, "--index", "annoy"],
        ["index", store, "--dtype", "float64"],
        ["mine", store, "--hard", "--index", "annoy"],
        ["mine", store, "--hard", "--dtype", "float64"],
        ["mine", store, "--hard", "-o", out + "/x.txt"],
        ["mine", store, "--hard", "--device", "cuda:x"],
        ["mine", store, "--hard", "--filter-false-negatives", "--fn-mode", "drop"],
        ["dedup", store, "-o", out + "/x.txt"],
        ["dedup", store, "--device", "tpu"],
        ["dedup", store, "--keep", "biggest"],
        ["train", store, "-o", out + "/h", "--relation", "instance", "--device", "gpu"],
        ["train", store, "-o", out + "/h", "--relation", "instance", "--loss", "ntxent"],
        ["project", store, "--head", out + "/h", "-o", out + "/p", "--dtype", "float64"],
        ["eval", store, "--metrics", "foo"],
        ["eval", store, "--device", "gpu"],
        ["eval", store, "--knn-k", "a"],
        ["eval", store, "--plot", out + "/p", "--map", "tsne"],
        ["search", store, "0", "--device", "gpu"],
        ["search", store, "0", "-o", out + "/x.txt"],
        ["search", store, "not-a-query"],
    ]


def test_bad_option_values_are_usage_errors(store, tmp_path: Path) -> None:
    for args in bad_usage_cases(str(store.root), str(tmp_path)):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
        assert not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize(("command", "old", "new"), [
    ("mine", "--gpu", "--device cuda"), ("mine", "--no-gpu", "--device cpu"),
    ("mine", "--float16", "--dtype float16"), ("mine", "--keep-flagged", "--fn-mode keep"),
    ("index", "--kind", "--index"), ("eval", "--gpu", "--device cuda"),
    ("index", "--float16", "--dtype float16"),
    ("mine", "--fn-community-neighbors", "--fn-community-neighbours"),
])
def test_old_spellings_name_their_replacement(store, command: str, old: str, new: str) -> None:
    r = runner.invoke(app, [command, str(store.root), old])
    assert r.exit_code == 2 and f"{old} was replaced: use {new}" in r.output


def test_threads_is_a_global_option(store, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from pairkit.core import threads

    for name in (threads.ENV, *threads.LIBRARY_ENV):
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    r = runner.invoke(app, ["--threads", "3", "index", str(store.root), "-q", "--force"])
    assert r.exit_code == 0, r.output
    assert os.environ[threads.ENV] == "3" and os.environ["OMP_NUM_THREADS"] == "3"
    r = runner.invoke(app, ["--threads", "0", "index", str(store.root)])
    assert r.exit_code == 2
    r = runner.invoke(app, ["index", str(store.root), "--threads", "2"])
    assert r.exit_code == 2 and "pairkit --threads N" in r.output


def test_wrong_paths_are_reported_before_heavy_imports(tmp_path: Path) -> None:
    """Every command says no to a missing input before torch (or faiss) loads: each runs in
    one fresh interpreter, which then reports what it imported."""

    missing = str(tmp_path / "missing")
    runs = [["embed", missing, "-o", str(tmp_path / "s"), "--model", "pixels"],
            ["import", missing + ".npy", "--items", missing + ".csv", "-o", str(tmp_path / "s")],
            ["index", missing], ["mine", missing, "--hard"], ["dedup", missing],
            ["train", missing, "-o", str(tmp_path / "h"), "--relation", "instance"],
            ["project", missing, "--head", missing, "-o", str(tmp_path / "p")],
            ["eval", missing], ["search", missing, "0"], ["info", missing]]
    codes, heavy, stderr = exit_codes_in_one_child(runs)
    assert codes == [1] * len(runs), stderr
    assert heavy == [], heavy
    assert stderr.count("error: ") == len(runs) and "Traceback" not in stderr


@pytest.mark.parametrize("code", ["EACCES", "EPERM", "EROFS"])
def test_an_output_the_system_refuses_is_one_plain_line(code, capsys) -> None:
    """Found by a conventions hunt (2026-12-06): ``-o`` in a folder the user can't write
    (or a read-only file system) was "internal error: PermissionError ... report it"."""
    import errno

    import typer

    from pairkit.cli.common import user_errors

    with pytest.raises(typer.Exit) as info, user_errors():
        raise OSError(getattr(errno, code), "Permission denied", "/data/out/.t.csv.x1.tmp")
    assert info.value.exit_code == 1
    err = capsys.readouterr().err
    assert "internal error" not in err
    why = "read-only file system" if code == "EROFS" else "permission denied"
    assert f"can't write /data/out/.t.csv.x1.tmp: {why}" in " ".join(err.split())


def test_an_output_in_a_folder_that_is_not_writable_is_refused_before_the_work(
        tmp_path, monkeypatch) -> None:
    """The same, found before any work: the nearest existing folder of an output must be
    writable (``os.access``; root passes it, so the check is exercised by hand here)."""
    import os

    from pairkit.core.paths import check_output_apart
    from pairkit.errors import PairkitError

    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(tmp_path)
                        else real(p, m))
    with pytest.raises(PairkitError, match=f"-o {tmp_path}/sub/x.csv: can't write in "
                                           f"{tmp_path} \\(permission denied\\)"):
        check_output_apart(tmp_path / "sub" / "x.csv", [])


def test_ctrl_c_while_the_command_line_loads_or_parses_is_one_line(monkeypatch, capsys) -> None:
    """Found by a conventions hunt (2026-12-06): Ctrl-C in the first ~0.1 s (while typer and
    the commands import) printed a 20-line traceback; outside a command's own handler
    (Click parsing, after the output) it exited 130 without a word."""
    import builtins

    import pairkit.cli as cli
    import pairkit.cli.main as cli_main

    real = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "pairkit.cli.main":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    # entry() would hand this test process's SIGTERM to pairkit (pairkit.core.terminate)
    monkeypatch.setattr("pairkit.core.terminate.raise_on_sigterm", lambda: None)
    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as info:
        cli.entry()
    monkeypatch.setattr(builtins, "__import__", real)
    assert info.value.code == 130 and capsys.readouterr().err == "error: interrupted\n"

    def app() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "app", app)
    with pytest.raises(SystemExit) as info:
        cli_main.main()
    assert info.value.code == 130 and capsys.readouterr().err == "error: interrupted\n"


def test_messages_are_printed_as_written_without_emoji_codes(store, tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): rich turned ':fire:' in a path into an emoji in
    every summary, warning and error line."""
    missing = tmp_path / "run:fire:x"
    r = runner.invoke(app, ["info", str(missing)])
    assert r.exit_code == 1 and f"store {missing} not found" in " ".join(r.output.split())


def test_an_existing_path_of_the_wrong_kind_is_named_so(store, tmp_path: Path) -> None:
    """Found by a bug hunt (hunt-s 4): a file given as a head folder, a folder as the labels
    file were reported "not found"."""
    from tests.conftest import make_images
    from tests.proc import error_lines

    s = str(store.root)
    a_file = tmp_path / "items.csv"
    a_file.write_text("path,label\n")
    images = tmp_path / "images"
    make_images(images, n_per_class=1, classes=2)
    for args, message in (
            (["eval", s, "--head", str(a_file)],
             f"head {a_file} is a file, expected a head folder (written by pairkit train)"),
            (["project", s, "--head", str(a_file), "-o", str(tmp_path / "p")],
             f"head {a_file} is a file, expected a head folder (written by pairkit train)"),
            (["embed", str(images), "-o", str(tmp_path / "e"), "--model", "pixels", "--labels",
              str(images)], f"--labels {images} is a folder, expected a table of path,label "
                            "(or use --labels folder)")):
        r = runner.invoke(app, args)
        assert r.exit_code == 1, (args, r.output)
        assert error_lines(r.stderr) == [f"error: {message}"], (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images", "items.csv"]


def test_docs_index_names_the_build_options_mine_has() -> None:
    """Found by a bug hunt (hunt-s 6): docs/index.md listed --pq-m, --hnsw-m and
    --ef-construction as options that make mine rebuild a saved index; mine has none of them
    (--ef-construction no command has)."""
    import re

    text = " ".join((PACKAGE.parent / "docs" / "index.md").read_text().split())
    listed = re.search(r"a build option given to that command \((.*?)\) differs", text)
    assert listed, "the sentence on build options moved: update this test"
    named = re.findall(r"`(--[a-z0-9-]+)", listed.group(1))
    mine = {opt for param in COMMANDS["mine"].params for opt in getattr(param, "opts", [])}
    assert named and set(named) <= mine, sorted(set(named) - mine)


@pytest.mark.parametrize(("raised", "code", "line"), [
    (ValueError("bad value\nsecond line"), 1,
     "error: internal error: ValueError: bad value (rerun with PAIRKIT_DEBUG=1 for the "
     "traceback and report it)"),
    (KeyboardInterrupt(), 130, "error: interrupted"),
    (MemoryError(), 1, "error: out of memory: try a smaller --batch-size or a smaller input"),
    (RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), 1,
     "error: CUDA out of memory: try a smaller --batch-size"),
    (MemoryError("Unable to allocate 11.9 GiB for an array with shape (40000, 40000) and "
                 "data type float64"), 1,
     "error: out of memory: can't allocate 11.9 GiB: try a smaller --batch-size or a "
     "smaller input"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                  "allocate memory: you tried to allocate 1073741824 bytes. Error code 12 "
                  "(Cannot allocate memory)"), 1,
     "error: out of memory: can't allocate 1.0 GiB: try a smaller --batch-size or a "
     "smaller input"),
])
def test_unexpected_failures_are_one_line_with_their_exit_code(raised, code, line, capsys,
                                                               monkeypatch) -> None:
    """user_errors(): one line on stderr and the exit code, no traceback; an unexpected
    exception raises as it is only with PAIRKIT_DEBUG set."""
    import typer

    from pairkit.cli.common import user_errors

    monkeypatch.delenv("PAIRKIT_DEBUG", raising=False)
    with pytest.raises(typer.Exit) as info, user_errors():
        raise raised
    assert info.value.exit_code == code
    assert capsys.readouterr().err == line + "\n"
    if isinstance(raised, ValueError):
        monkeypatch.setenv("PAIRKIT_DEBUG", "1")
        with pytest.raises(ValueError, match="bad value"), user_errors():
            raise raised


def test_command_defaults_are_the_librarys() -> None:
    """Mutation audit 5b (SE1, IX2, RP1, RP2, IM1, PJ2): a default changed on its way from
    the command line to the library went unseen; each is the library's own default."""
    import dataclasses
    import inspect

    from pairkit.core.importer import import_embeddings
    from pairkit.index.options import EXACT_MAX_ROWS_CPU, IndexOptions
    from pairkit.index.query import QueryRequest
    from pairkit.report.build import ReportConfig
    from pairkit.train.project_command import ProjectConfig

    def cli(name: str) -> dict:
        return {p.name: p.default for p in get_command(app).commands[name].params}

    def lib(config) -> dict:
        return {f.name: f.default for f in dataclasses.fields(config)}

    imp = {k: p.default for k, p in inspect.signature(import_embeddings).parameters.items()}
    for command, ref, names in (
            ("search", lib(QueryRequest), ("k", "include_same_source", "device")),
            ("index", lib(IndexOptions), ("kind", "hnsw_m", "seed")),
            ("report", lib(ReportConfig), ("sample", "seed", "thumb_size")),
            ("project", lib(ProjectConfig), ("batch_size", "dtype", "device")),
            ("import", imp, ("dtype", "encoder"))):
        defaults = cli(command)
        for name in names:
            assert defaults[name] == ref[name], (command, name)
    index = cli("index")
    assert index["exact_max_rows"] == EXACT_MAX_ROWS_CPU and index["dtype"] == "float32"


def test_index_passes_its_dtype_on(store, monkeypatch) -> None:
    """Mutation audit 5b (IX1): ``index --dtype float16`` built a float32 index unseen."""
    import pairkit.index.command as command
    from pairkit.errors import PairkitError

    seen = []

    def fake(store, options, **kw):
        seen.append(options)
        raise PairkitError("stopped by the test")

    monkeypatch.setattr(command, "index_to_files", fake)
    for dtype, half in (("float16", True), ("float32", False)):
        r = runner.invoke(app, ["index", str(store.root), "--dtype", dtype])
        assert r.exit_code == 1 and "stopped by the test" in r.stderr, r.output
        assert seen[-1].float16 is half


def test_embed_passes_its_shard_rows_on(tmp_path: Path, monkeypatch) -> None:
    """Mutation audit 5b (ED1): ``embed --shard-rows`` reached the library unseen; 0 is
    a usage error."""
    import pairkit.encode.embedder as embedder
    from pairkit.errors import PairkitError

    seen = []

    def fake(cfg, hook=None, executor=None):
        seen.append(cfg)
        raise PairkitError("stopped by the test")

    monkeypatch.setattr(embedder, "embed_folder", fake)
    args = ["embed", str(tmp_path), "-o", str(tmp_path / "s"), "--model", "pixels",
            "--device", "cpu", "--shard-rows"]
    r = runner.invoke(app, [*args, "7"])
    assert r.exit_code == 1 and "stopped by the test" in r.stderr, r.output
    assert [c.shard_rows for c in seen] == [7]
    r = runner.invoke(app, [*args, "0"])
    assert r.exit_code == 2 and "--shard-rows must be >= 1, got 0" in r.stderr, r.output
