"""The GPU suite's script runs here: its plan (--dry-run) and its CPU smoke mode on the
cheap parts, so a session that is lent a GPU finds it working (tests/benchmarks/gpu_suite.py;
the GPU figures themselves are measured there, not here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "benchmarks" / "gpu_suite.py"


def _run(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess,
                                                                       dict | None]:
    out = tmp_path / "suite.json"
    proc = subprocess.run([sys.executable, str(SUITE), "--out", str(out), "--log",
                           str(tmp_path / "suite.log"), "--work", str(tmp_path / "work"),
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_dry_run_plans_every_part_inside_the_budget(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "--dry-run", "--budget", "430")
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result["dry_run"] is True
    parts = result["parts"]
    assert list(parts) == ["tests", "startup", "embed", "data", "mine", "eval", "fn"]
    assert all(p["runs"] for p in parts.values())
    assert sum(p["worst_case_guard_s"] for p in parts.values()) <= 430
    assert parts["mine"]["needs"]["torch"] is True  # this Python has torch


def test_unknown_part_is_one_usage_line(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "--dry-run", "--parts", "tests,embedd")
    assert proc.returncode == 2 and result is None
    assert "unknown part(s) embedd" in proc.stderr


def test_smoke_runs_the_start_up_data_and_mine_parts_on_the_cpu(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "--smoke", "--parts", "startup,data,mine", "--budget", "280")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    parts = result["parts"]
    for name in ("startup", "data", "mine"):
        assert parts[name]["rc"] == 0 and not parts[name]["timed_out"], parts[name]
    startup = parts["startup"]
    assert startup["embed_4_jpegs_s"] > startup["import_torch_s"] > 0
    assert abs(startup["fixed_cost_beyond_import_torch_s"]
               - (startup["embed_4_jpegs_s"] - startup["import_torch_s"])) < 2e-3
    assert parts["data"]["reference_store"]["rows"] == 6_000
    assert parts["mine"]["whole_command"]["rc"] == 0


def test_smoke_runs_the_big_source_case_of_the_fn_part_without_the_data_part(tmp_path: Path
                                                                             ) -> None:
    proc, result = _run(tmp_path, "--smoke", "--parts", "fn", "--budget", "150")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    fn = result["parts"]["fn"]
    assert fn["rc"] == 0 and not fn["timed_out"], fn
    assert fn["skipped"].startswith("no data")
    big = fn["big_source"]
    assert big["rc"] == 0 and big["rows"] == 3_000 and big["big_source_rows"] == 1_000, big
    assert big["index"] and big["seconds"]
