"""Probe of issue 20.14: ``pairkit report TABLE`` without ``--store`` beside stores damaged
in every way we know, in each folder report looks in (a sibling folder, a sub-folder of the
table's folder, the table's folder itself).

Each case: a fresh folder with the table's own store (``real``), the table (``work/p.jsonl``,
with or without ``store_id``) and one damaged store; ``python -m pairkit report`` in a child
process; the exit code, whether the page used the ``real`` store, and the last stderr line.
A report must exit 0 and find ``real`` in every case. Cases that need an unprivileged user
(folders closed with mode 000) run under ``setpriv`` as uid 65534 when this runs as root.

Run:  python tests/benchmarks/report_nearby.py [--checkout ../main] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from tests.proc import REPO, child_env  # noqa: E402

KINDS = ("items-garbage", "items-missing", "items-dir", "items-other-parquet", "items-000",
         "manifest-not-json", "manifest-truncated", "manifest-checksum", "manifest-list",
         "manifest-empty", "manifest-300MB", "manifest-dev-zero", "manifest-fifo",
         "manifest-symlink-loop", "manifest-000", "shard-truncated", "shard-missing",
         "shard-dir", "folder-000", "folder-symlink-loop")
NEEDS_USER = ("items-000", "manifest-000", "folder-000")  # root reads any of these
WHERE = ("sibling", "sub-folder", "table's folder")


def write(path: Path, paths: list[str], flip: bool = False):  # noqa: ANN201
    from pairkit.core.store_writer import write_store

    x = np.eye(len(paths), dtype=np.float32)
    return write_store(path, x[::-1].copy() if flip else x, pd.DataFrame({"path": paths}),
                       dtype="float32")


def damage(kind: str, s: Path) -> None:
    m = json.loads((s / "manifest.json").read_text())
    items, shard, man = s / m["items"]["file"], s / m["shards"][0]["file"], s / "manifest.json"
    if kind == "items-garbage":
        items.write_bytes(b"PAR1 damaged")
    elif kind == "items-missing":
        items.unlink()
    elif kind == "items-dir":
        items.unlink()
        items.mkdir()
    elif kind == "items-other-parquet":
        pd.DataFrame({"a": [1]}).to_parquet(items)
    elif kind == "items-000":
        items.chmod(0)
    elif kind == "manifest-not-json":
        man.write_text("{not json")
    elif kind == "manifest-truncated":
        man.write_bytes(man.read_bytes()[:50])
    elif kind == "manifest-checksum":
        m["count"] = 4
        man.write_text(json.dumps(m))
    elif kind == "manifest-list":
        man.write_text("[]")
    elif kind == "manifest-empty":
        man.write_bytes(b"")
    elif kind == "manifest-300MB":
        with open(man, "wb") as fh:
            fh.truncate(300 << 20)
    elif kind == "manifest-dev-zero":
        man.unlink()
        man.symlink_to("/dev/zero")
    elif kind == "manifest-fifo":
        man.unlink()
        os.mkfifo(man)
    elif kind == "manifest-symlink-loop":
        man.unlink()
        man.symlink_to(man)
    elif kind == "manifest-000":
        man.chmod(0)
    elif kind == "shard-truncated":
        shard.write_bytes(shard.read_bytes()[:100])
    elif kind == "shard-missing":
        shard.unlink()
    elif kind == "shard-dir":
        shard.unlink()
        shard.mkdir()
    elif kind == "folder-000":
        s.chmod(0)
    elif kind == "folder-symlink-loop":
        shutil.rmtree(s)
        s.symlink_to(s)
    else:
        raise ValueError(kind)


def case(base: Path, kind: str, where: str, with_id: bool, user: bool,
         checkout: Path) -> tuple[object, bool, str]:
    d = Path(tempfile.mkdtemp(dir=base))
    (d / "work").mkdir()
    real = write(d / "real", ["x.png", "y.png", "z.png"])
    t = pd.DataFrame({"anchor_id": [0], "positive_id": [1], "negative_id": [2],
                      "anchor_path": ["x.png"], "positive_path": ["y.png"],
                      "negative_path": ["z.png"]})
    if with_id:
        t.insert(0, "store_id", real.content_id)
    t.to_json(d / "work" / "p.jsonl", orient="records", lines=True)
    # the damaged store holds other paths and vectors: it is not the table's
    if where == "table's folder":
        write(d / "tmp", ["q.png", "r.png", "s.png"], flip=True)
        for f in (d / "tmp").iterdir():
            shutil.move(str(f), d / "work" / f.name)
        (d / "tmp").rmdir()
        bad = d / "work"
    else:
        bad = d / "aaa" if where == "sibling" else d / "work" / "aaa"
        write(bad, ["q.png", "r.png", "s.png"], flip=True)
    if kind == "folder-000" and where == "table's folder":
        return "n/a", True, "(the table itself would be unreadable)"
    if kind == "folder-symlink-loop" and where == "table's folder":
        return "n/a", True, "(the table itself would be gone)"
    cmd = [sys.executable, "-m", "pairkit", "report", "work/p.jsonl", "-o", "rep"]
    if user:
        for p in [d, *d.rglob("*")]:
            os.lchown(p, 65534, 65534)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    damage(kind, bad)
    if user:
        os.lchown(bad, 0, 0)  # someone else's
    env = child_env()
    env["PYTHONPATH"] = str(checkout)
    env["HOME"] = str(d)
    try:
        p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "timeout", False, ""
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    used = False
    if p.returncode == 0:
        blob = (d / "rep" / "index.html").read_text()
        used = json.dumps(str(d / "real"))[1:-1] in blob
    for f in [d, *d.rglob("*")]:
        if not f.is_symlink():
            f.chmod(0o755)
    shutil.rmtree(d, ignore_errors=True)
    return p.returncode, used, lines[-1][:140] if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--checkout", type=Path, default=REPO,
                    help="the pairkit checkout to run (default: this one)")
    args = ap.parse_args()
    root = os.geteuid() == 0
    can_drop = root and shutil.which("setpriv") is not None
    base = Path(tempfile.mkdtemp(prefix="pairkit-nearby-"))
    base.chmod(0o755)
    rows = ["| damage | where | store_id | as | exit | used the table's store | last line |",
            "|---|---|---|---|---|---|---|"]
    bad = 0
    try:
        for kind in KINDS:
            user = kind in NEEDS_USER
            if user and root and not can_drop:
                continue
            for where in WHERE:
                for with_id in (False, True):
                    code, used, last = case(base, kind, where, with_id, user and root,
                                           args.checkout)
                    ok = code == "n/a" or (code == 0 and used)
                    bad += not ok
                    who = "uid 65534" if user and root else "this user"
                    rows.append(f"| {kind} | {where} | {'yes' if with_id else 'no'} | {who} | "
                                f"{code} | {'yes' if used else 'no'} | "
                                f"{'' if ok else last.replace('|', '/')} |")
                    print(rows[-1], flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows.append(f"\n{len(rows) - 2} cases, {bad} not ok")
    print(rows[-1])
    if args.out:
        args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
