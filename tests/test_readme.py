"""The README's tour, run as written after a demo: every command works, and the lines it
prints are the lines the README shows (numbers aside: the demo here is smaller)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def tour_text() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## A tour")
    return text[start : text.index("\n## ", start + 1)]


def tour_steps() -> list[tuple[str, list[str] | None]]:
    """``(command, lines shown under it or None)`` in README order: ``$ ``-prompted
    commands of plain code blocks with their output, then the lines of ``bash`` blocks
    (commands without shown output; ``\\`` continues a line)."""
    steps: list[tuple[str, list[str] | None]] = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", tour_text(), flags=re.S):
        lines = body.rstrip("\n").split("\n")
        if lang == "bash":
            joined = "\n".join(lines).replace("\\\n", " ")
            steps += [(c.strip(), None) for c in joined.split("\n")
                      if c.strip() and not c.strip().startswith("#")]
            continue
        shown: list[str] | None = None  # output lines belong to a $ line of the same block
        for line in lines:
            if line.startswith("$ "):
                shown = []
                steps.append((line[2:].split("  #")[0].strip(), shown))
            elif shown is not None:
                shown.append(line)
    return steps


def key(line: str) -> str:
    """A printed line without its numbers: its first three words, digits as #; mine's
    "candidates removed:" line by its first two (which reasons removed some depends on
    the data: the tour's 300 digits remove no positive where the README's 1,797 did)."""
    words = re.sub(r"\d[\d,.]*", "#", line).split()
    return " ".join(words[:2] if words[:2] == ["candidates", "removed:"] else words[:3])


def test_the_tour_is_parsed() -> None:
    steps = tour_steps()
    commands = [c for c, _ in steps]
    assert any(c.startswith("pairkit embed demo-run/images") for c in commands)
    assert any(c.startswith("pairkit dedup demo-run/store") for c in commands)
    assert any("| pairkit train demo-run/store --pairs -" in c for c in commands)
    assert any("read -r -d ''" in c and "mkdir -p" in c for c in commands)  # quarantine
    assert all(out for c, out in steps if out is not None and c.startswith("pairkit"))


def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "200"
    demo = subprocess.run([sys.executable, "-m", "pairkit", "demo", "demo-run", "--limit", "300",
                           "--epochs", "2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert demo.returncode == 0, demo.stderr
    for command, shown in tour_steps():
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (command, proc.stderr)
        assert "Traceback" not in proc.stderr
        if shown is None:
            continue
        printed = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
        want = {key(x) for x in shown if x.strip() and x.strip() != "..."}
        got = {key(x) for x in printed}
        assert want == got, (command, sorted(want - got), sorted(got - want))
    # the quarantine pipeline moved the dropped copies, keeping their sub-folders
    moved = sorted(p.relative_to(tmp_path / "demo-run" / "quarantine").as_posix()
                   for p in (tmp_path / "demo-run" / "quarantine").rglob("*.*"))
    assert moved and all("/" in p for p in moved)
    for p in moved:
        assert not (tmp_path / "demo-run" / "images" / p).exists()
