"""Without ``--ray`` nothing changes and Ray is never imported; with ``--ray`` (or
PAIRKIT_RAY_ADDRESS) and no Ray installed, one line says how to get it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.proc import start_python

SETUP = """
import os, sys
from pathlib import Path
import numpy as np, pandas as pd
from typer.testing import CliRunner
from pairkit.cli.main import app
from pairkit.core.store_writer import write_store
root = Path(ROOT)
rng = np.random.default_rng(0)
items = pd.DataFrame({"path": [f"c{i % 3}/s{i // 2}.jpg" for i in range(60)],
                      "view": [i % 2 for i in range(60)],
                      "label": [f"c{i % 3}" for i in range(60)]})
items["source"] = items["path"]
write_store(root / "st", rng.normal(size=(60, 8)).astype("float32"), items)
runner = CliRunner()
"""


def run(tmp_path: Path, code: str, before: str = "") -> list[str]:
    """Run SETUP then ``code`` in a child Python; its stdout lines."""
    script = before + SETUP.replace("ROOT", repr(str(tmp_path))) + textwrap.dedent(code)
    proc = start_python(script)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out.strip().splitlines()


def test_no_ray_import_without_the_flag(tmp_path: Path) -> None:
    lines = run(tmp_path, """
        from tests.conftest import make_images
        make_images(root / "img", n_per_class=2, classes=2)
        for args in (["mine", str(root / "st"), "--hard", "-o", str(root / "p.parquet")],
                     ["mine", str(root / "st"), "--hard", "--filter-false-negatives",
                      "-o", str(root / "pp") + "/"],
                     ["dedup", str(root / "st"), "-o", str(root / "d.csv")],
                     ["eval", str(root / "st"), "--json", "--metrics", "knn,retrieval"],
                     ["embed", str(root / "img"), "-o", str(root / "s2"), "--model", "pixels"]):
            r = runner.invoke(app, args)
            assert r.exit_code == 0, (args, r.output)
        print("ray" in sys.modules, [m for m in sys.modules if m.startswith("pairkit.distributed")])
    """)
    assert lines == ["False []"]


def test_ray_flag_without_ray_installed(tmp_path: Path) -> None:
    lines = run(tmp_path, """
        def last(args):
            r = runner.invoke(app, args)
            print(r.exit_code, r.output.strip().splitlines()[-1])

        last(["mine", str(root / "st"), "--hard", "--ray", "local"])
        os.environ["PAIRKIT_RAY_ADDRESS"] = "auto"  # the flag's default
        last(["dedup", str(root / "st")])
        del os.environ["PAIRKIT_RAY_ADDRESS"]
        last(["mine", str(root / "st"), "--hard", "--ray", "local", "--backend", "torch"])
    """, before="import sys\nsys.modules['ray'] = None  # as if Ray were not installed\n")
    hint = "error: --ray needs Ray, which is not installed: pip install 'pairkit[ray]'"
    assert lines[0] == f"1 {hint} (or pip install ray)"
    assert lines[1] == f"1 {hint} (or pip install ray)"
    assert lines[2].startswith("2 error: mine --ray searches on the workers' CPUs")
