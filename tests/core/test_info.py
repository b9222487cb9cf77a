"""pairkit info (facts of a store, checksums), -V/--version and shell completion."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairkit import __version__
from pairkit.cli.main import app
from pairkit.core.info import store_info
from tests.conftest import make_images, random_store
from tests.proc import with_repo_path

runner = CliRunner()


def test_facts_of_a_random_store(tmp_path: Path) -> None:
    st = random_store(tmp_path / "s", n_sources=10, views=3, dim=8, classes=2)
    info = store_info(st.root)
    files = [tmp_path / "s" / s.file for s in st.shards]
    files.append(tmp_path / "s" / st.manifest["items"]["file"])
    assert info["rows"] == 30 and info["sources"] == 10 and info["views"] == [0, 1, 2]
    assert info["views_per_source"] == {"min": 3, "max": 3}
    assert info["dim"] == 8 and info["dtype"] == "float32" and info["format_version"] == 2
    assert info["labels"] == 2 and info["labeled_rows"] == 30
    assert info["top_labels"] == {"c0": 15, "c1": 15}
    assert info["bytes"] == sum(f.stat().st_size for f in files)
    assert info["vector_bytes"] == files[0].stat().st_size
    assert info["encoder"] == "random" and info["content_id"] == st.content_id
    assert info["checksums"] == "ok" and info["errors"] == 0 and info["indexes"] == []


def test_cli_lines_and_json_of_an_embedded_store(tmp_path: Path) -> None:
    make_images(tmp_path / "img", n_per_class=2, classes=2)
    (tmp_path / "img" / "class0" / "broken.png").write_bytes(b"not a png")
    r = runner.invoke(app, ["embed", str(tmp_path / "img"), "-o", str(tmp_path / "s"),
                            "--model", "fake", "--views", "2", "--labels", "folder", "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["info", str(tmp_path / "s"), "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert (info["rows"], info["sources"], info["errors"]) == (8, 4, 1)
    assert info["embedding"]["model"] == "fake" and info["label_source"] == "folder"
    r = runner.invoke(app, ["info", str(tmp_path / "s")])
    text = r.output
    assert "rows 8: 4 sources, views 2 per source" in text
    assert "encoder: fake" in text and "labels: 8 of 8 rows labelled, 2 labels" in text
    assert f"files that could not be embedded: 1 ({info['errors_file']})" in text
    assert re.fullmatch(r"errors-[0-9a-f]{8}-\d{5}\.jsonl", info["errors_file"])
    assert text.strip().endswith("checksums: ok")


def test_damage_is_an_error_and_no_verify_skips_the_hashes(tmp_path: Path) -> None:
    st = random_store(tmp_path / "s")
    shard = tmp_path / "s" / st.shards[0].file
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))
    r = runner.invoke(app, ["info", str(tmp_path / "s")])
    assert r.exit_code == 1 and "checksum mismatch" in r.output
    r = runner.invoke(app, ["info", str(tmp_path / "s"), "--no-verify"])
    assert r.exit_code == 0 and "checksums: not checked" in r.output
    r = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert r.exit_code == 1 and r.output.strip() == f"error: store {tmp_path / 'nope'} not found"


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str) -> None:
    r = runner.invoke(app, [flag])
    assert r.exit_code == 0 and r.output.strip() == f"pairkit {__version__}"


def _complete(words: str) -> list[str]:
    """What bash completion offers for the command line ``words`` (Click's protocol)."""
    env = {**os.environ, "PYTHONPATH": with_repo_path(), "_PAIRKIT_COMPLETE": "complete_bash",
           "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    code = "import sys; sys.argv[0] = 'pairkit'; from pairkit.cli.main import main; main()"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_shell_completion_completes_commands_and_options() -> None:
    assert _complete("pairkit se") == ["search"]
    assert set(_complete("pairkit i")) == {"import", "index", "info", "issues"}
    assert "--fn-mode" in _complete("pairkit mine store --fn-m")


def test_show_completion_prints_a_script() -> None:
    # shell detection off (read when the app is built, so in a child): the shell is named
    env = {**os.environ, "PYTHONPATH": with_repo_path(),
           "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    code = ("import sys; sys.argv[:] = ['pairkit', '--show-completion', 'bash']; "
            "from pairkit.cli.main import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "_PAIRKIT_COMPLETE=complete_bash" in proc.stdout
    assert "complete -o default -F _pairkit_completion pairkit" in proc.stdout


def test_an_index_of_rows_since_appended_to_is_shown_stale(tmp_path: Path) -> None:
    """Found by a CLI bug hunt (2026-12-06): after embed appended rows, info still listed
    the saved index as if it applied (mine, eval and dedup no longer load it)."""
    make_images(tmp_path / "img", n_per_class=3, classes=2)
    (tmp_path / "img" / "class0" / "img1.png").rename(tmp_path / "later.png")
    store, img = str(tmp_path / "s"), str(tmp_path / "img")
    assert runner.invoke(app, ["embed", img, "-o", store, "--model", "pixels", "-q"]).exit_code == 0
    r = runner.invoke(app, ["index", store, "--index", "flat"])
    assert r.exit_code == 0, r.output
    assert store_info(store)["stale_indexes"] == []
    assert "saved indexes: flat.faiss\n" in runner.invoke(app, ["info", store]).output
    (tmp_path / "later.png").rename(tmp_path / "img" / "class0" / "img1.png")
    assert runner.invoke(app, ["embed", img, "-o", store, "--model", "pixels", "-q"]).exit_code == 0
    info = store_info(store)
    assert info["indexes"] == ["flat.faiss"] and info["stale_indexes"] == ["flat.faiss"]
    out = runner.invoke(app, ["info", store]).output
    assert "saved indexes: flat.faiss (stale: built for other rows, not used" in out


def test_label_text_is_shown_escaped(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): labels were printed raw, so a line break in one
    forged a line of the report and an ANSI escape reached the terminal."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store_writer import write_store

    items = pd.DataFrame({"path": ["a", "b", "c", "d"],
                          "label": ["evil\nrows 999999: forged", "\x1b[31mRED\x1b[0m", "ok", "ok"]})
    write_store(tmp_path / "s", np.eye(4, dtype=np.float32), items, encoder={"name": "x"})
    r = runner.invoke(app, ["info", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and not any(
        line.startswith("rows 999999") for line in r.output.splitlines())
    assert "'evil\\nrows 999999: forged' 1" in r.output and "ok 2" in r.output


def test_encoder_and_image_root_are_shown_escaped(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): the encoder name (any text `import --encoder`
    takes) and the image root were printed raw: a line break forged "checksums: ok" on
    a store that was not verified."""
    import numpy as np
    import pandas as pd

    from pairkit.core.store_writer import write_store

    items = pd.DataFrame({"path": ["a", "b", "c"]})
    write_store(tmp_path / "s", np.eye(3, dtype=np.float32), items,
                encoder={"name": "x\nchecksums: ok", "pretrained": "\x1b[31mred"},
                extra={"image_root": "/data/\nrows 1: forged"})
    r = runner.invoke(app, ["info", str(tmp_path / "s"), "--no-verify"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "\x1b" not in r.output
    assert [line for line in lines if line.startswith("checksums")] == [
        "checksums: not checked"]
    assert not any(line.startswith("rows 1") for line in lines)
    assert "encoder: 'x\\nchecksums: ok' (pretrained '\\x1b[31mred')" in lines
    assert "image root: '/data/\\nrows 1: forged'" in lines


def test_version_dates_and_index_names_are_shown_escaped(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): ``pairkit_version``, ``created``, ``updated`` and
    the saved index names were printed raw, so a consistent (resealed) manifest forged a
    "checksums: ok" line and sent ANSI escapes to the terminal."""
    import numpy as np
    import pandas as pd

    from pairkit.core.integrity import dump_sealed
    from pairkit.core.store_writer import write_store

    root = tmp_path / "s"
    write_store(root, np.eye(3, dtype=np.float32), pd.DataFrame({"path": ["a", "b", "c"]}),
                encoder={"name": "x"})
    m = json.loads((root / "manifest.json").read_text())
    m.pop("self_sha256")
    m.update(pairkit_version="0.1.0)\nchecksums: ok\x1b[31mRED", created="2026\nfake line",
             updated="\x1b[2J")
    with open(root / "manifest.json", "w") as fh:
        dump_sealed(m, fh)
    (root / "index").mkdir()
    (root / "index" / "x\nchecksums: ok.faiss").write_bytes(b"")
    r = runner.invoke(app, ["info", str(root), "--no-verify"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "\x1b" not in r.output
    assert [line for line in lines if line.startswith("checksums")] == [
        "checksums: not checked"]
    assert not any(line.startswith("fake line") for line in lines)
    assert "(written by pairkit '0.1.0)\\nchecksums: ok\\x1b[31mRED')" in r.output
    assert "created '2026\\nfake line', updated '\\x1b[2J'" in lines


def test_info_counts_the_skipped_files_embed_counts(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-06): with a symlink loop in the folder, embed said
    "skipped 2" (a loop is left out on purpose, not a file that failed) and info said
    "files that could not be embedded: 3"."""
    import shutil

    make_images(tmp_path / "m", n_per_class=1, classes=1)
    src = next((tmp_path / "m").rglob("*.jpg"))
    (tmp_path / "sy" / "a").mkdir(parents=True)
    shutil.copy(src, tmp_path / "sy" / "a" / "x.jpg")
    (tmp_path / "sy" / "a" / "loop").symlink_to("..")
    (tmp_path / "sy" / "link.jpg").symlink_to("a/x.jpg")
    os.link(tmp_path / "sy" / "a" / "x.jpg", tmp_path / "sy" / "hard.jpg")
    store = str(tmp_path / "s")
    r = runner.invoke(app, ["embed", str(tmp_path / "sy"), "-o", store, "--model", "pixels"])
    assert r.exit_code == 0, r.output
    assert "skipped 2" in r.output
    assert store_info(store)["errors"] == 2
    assert "files that could not be embedded: 2 (errors-" in runner.invoke(
        app, ["info", store]).output


def test_sources_sizes_and_an_index_of_other_rows(tmp_path: Path) -> None:
    """Mutation audit 4a (IF1, IF3, IF4): sources are counted by the source column (two
    paths of one source are one source); sizes in powers of 1,000; a saved index whose
    sealed record names another content id is stale even with the same row count."""
    import numpy as np
    import pandas as pd

    from pairkit.core.info import info_lines
    from pairkit.core.integrity import seal
    from pairkit.core.store_writer import write_store

    items = pd.DataFrame({"path": ["a.png", "b.png", "c.png"], "source": ["s", "s", "t"]})
    st = write_store(tmp_path / "s", np.eye(3, 4, dtype=np.float32), items)
    info = store_info(st.root)
    assert info["rows"] == 3 and info["sources"] == 2
    text = "\n".join(info_lines({**info, "bytes": 1000, "vector_bytes": 999}))
    assert "1.0 KB (999 B of vectors)" in text
    r = runner.invoke(app, ["index", str(st.root), "--index", "flat"])
    assert r.exit_code == 0, r.output
    assert store_info(st.root)["stale_indexes"] == []
    meta = next((st.root / "index").glob("*.json"))
    record = json.loads(meta.read_text())
    assert record["content_id"] == st.content_id and record["count"] == 3
    meta.write_text(json.dumps(seal({**record, "content_id": "other"})))  # sealed anew
    assert store_info(st.root)["stale_indexes"] == ["flat.faiss"]


def test_a_projected_store_names_its_head_and_input_store(tmp_path: Path) -> None:
    """Found by a bug hunt (2026-12-07): the text of ``info`` on a store written by
    ``pairkit project`` said ``encoder: random`` and nothing of the head its vectors went
    through (only ``--json`` had it, under ``encoder_details.head``): it read as the input
    store. One line names the head and the store it was projected from."""
    st = random_store(tmp_path / "s", n_sources=10, views=2, dim=8)
    r = runner.invoke(app, ["train", str(tmp_path / "s"), "-o", str(tmp_path / "h"),
                            "--relation", "instance", "-q", "--epochs", "1",
                            "--batch-size", "16", "--head", "mlp", "--out-dim", "4",
                            "--device", "cpu"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["project", str(tmp_path / "s"), "--head", str(tmp_path / "h"),
                            "-o", str(tmp_path / "p"), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["info", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    want = (f"projected: by head {tmp_path / 'h'} (mlp 8->4, loss infonce), from store "
            f"{tmp_path / 's'} (content id {st.content_id})")
    assert want in lines, r.output
    assert lines.index(want) == 1 + next(i for i, x in enumerate(lines)
                                         if x.startswith("encoder: "))
    info = json.loads(runner.invoke(app, ["info", str(tmp_path / "p"), "--json"]).stdout)
    assert info["projected"]["from_content_id"] == st.content_id
    r = runner.invoke(app, ["info", str(tmp_path / "s")])  # an unprojected store: no line
    assert not [x for x in r.output.splitlines() if x.startswith("projected:")]
    assert store_info(tmp_path / "s")["projected"] is None


HOLD = """
import sys
from pairkit.core.lock import writer_lock
with writer_lock(sys.argv[1], "store"):
    print("locked", flush=True)
    sys.stdin.read()   # hold until the test closes stdin
"""


def test_info_on_a_store_being_written_names_the_writer(tmp_path: Path) -> None:
    """An import in progress (its writer holds the lock; a shard, or only a temp file, and
    no manifest yet) is 'being written', not 'half-written'; once the writer is gone
    without a manifest, it is half-written."""
    import numpy as np
    import pandas as pd

    from pairkit.core.manifest import MANIFEST
    from pairkit.core.store_writer import write_store
    from tests.proc import start_python

    folder = tmp_path / "s"
    write_store(folder, np.eye(3, dtype=np.float32), pd.DataFrame({"path": list("abc")}))
    (folder / MANIFEST).unlink()  # the shard and item table are there, the commit is not
    empty = tmp_path / "t"
    empty.mkdir()
    (empty / ".embeddings-00000.npy.abcd1234.tmp").write_bytes(b"")  # the first shard's temp
    procs = [start_python(HOLD.replace("sys.argv[1]", repr(str(f)))) for f in (folder, empty)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "locked", proc.stderr.read()
        for f, proc in zip((folder, empty), procs, strict=True):
            r = runner.invoke(app, ["info", str(f)])
            assert r.exit_code == 1, r.output
            lines = [line for line in r.output.splitlines() if line.strip()]
            assert len(lines) == 1, r.output
            assert lines[0].startswith(f"error: store {f} is being written by pid {proc.pid} "
                                       "on "), lines[0]
            assert lines[0].endswith(": no manifest.json yet (wait for it to finish)")
    finally:
        for proc in procs:
            proc.stdin.close()
            assert proc.wait(timeout=30) == 0
    r = runner.invoke(app, ["info", str(folder)])
    assert r.exit_code == 1 and r.output.strip() == (
        f"error: store {folder} is half-written: no manifest.json (rerun the command that "
        "made it)")
