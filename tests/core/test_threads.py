"""One thread budget for torch, FAISS, BLAS and decoding (pairkit/core/threads.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pairkit.core import threads
from pairkit.errors import UsageError
from tests.proc import with_repo_path


def test_default_is_half_the_cpus_between_1_and_8() -> None:
    assert [threads.default_threads(c) for c in (1, 2, 3, 4, 16, 64)] == [1, 1, 1, 2, 8, 8]


def test_resolution_order() -> None:
    env = {"PAIRKIT_THREADS": "3", "OMP_NUM_THREADS": "5"}
    assert threads.resolve_threads(2, env) == (2, "--threads")
    assert threads.resolve_threads(None, env) == (3, "PAIRKIT_THREADS")
    assert threads.resolve_threads(None, {"OMP_NUM_THREADS": "5"}) == (5, "OMP_NUM_THREADS")
    assert threads.resolve_threads(None, {})[1] == "default"
    with pytest.raises(UsageError, match="PAIRKIT_THREADS must be an integer >= 1, got 'x'"):
        threads.resolve_threads(None, {"PAIRKIT_THREADS": "x"})
    with pytest.raises(UsageError, match="--threads must be an integer >= 1, got 0"):
        threads.resolve_threads(0, {})


def test_omp_num_threads_is_a_fallback_read_as_openmp_reads_it() -> None:
    """Found by a conventions hunt (2026-12-06): OpenMP's nested list ("4,2": 4 threads at
    the outer level), set by cluster schedulers and containers, made every command exit 2;
    it is not pairkit's option: its first number is the budget, and a value OpenMP itself
    would not take is passed over for the default."""
    assert threads.resolve_threads(None, {"OMP_NUM_THREADS": "4,2"}) == (4, "OMP_NUM_THREADS")
    assert threads.resolve_threads(None, {"OMP_NUM_THREADS": " 3 , 1"}) == (3, "OMP_NUM_THREADS")
    assert threads.resolve_threads(None, {"OMP_NUM_THREADS": "lots"})[1] == "default"
    assert threads.resolve_threads(None, {"OMP_NUM_THREADS": "0"})[1] == "default"
    with pytest.raises(UsageError, match="PAIRKIT_THREADS must be an integer >= 1"):
        threads.resolve_threads(None, {"PAIRKIT_THREADS": "4,2"})  # pairkit's own: strict
    # an empty or blank PAIRKIT_THREADS (``PAIRKIT_THREADS= cmd``) is unset, not bad usage
    assert threads.resolve_threads(None, {"PAIRKIT_THREADS": "  ", "OMP_NUM_THREADS": "5"}
                                   ) == (5, "OMP_NUM_THREADS")


def test_plan_shares_the_budget() -> None:
    small, big = threads.plan(1), threads.plan(8)
    # CPU embedding: one background decode thread below 4, else a quarter decodes
    assert small.decode_workers("cpu") == 0 and small.encoder_threads("cpu") == 1
    assert big.decode_workers("cpu") == 2 and big.encoder_threads("cpu") == 6
    # beside a GPU decoding gets the budget
    assert small.decode_workers("cuda") == 1 and big.decode_workers("cuda:0") == 8
    assert small.interop == 1 and big.interop == 4


def test_plan_boundaries_and_caps() -> None:
    """Mutation audit 5a: the edges of the budget's split. A budget of exactly 4 gives a
    quarter (1) to decoding on the CPU; beside a GPU decoding gets at most 8 and the
    encoder keeps the whole budget; the inter-op pool is at most 4 (16 // 2 = 8 capped)."""
    three, four, sixteen = threads.plan(3), threads.plan(4), threads.plan(16)
    assert three.decode_workers("cpu") == 0 and three.encoder_threads("cpu") == 3
    assert four.decode_workers("cpu") == 1 and four.encoder_threads("cpu") == 3
    assert sixteen.decode_workers("cpu") == 4 and sixteen.encoder_threads("cpu") == 12
    assert sixteen.decode_workers("cuda") == 8 and sixteen.decode_workers("cuda:1") == 8
    assert sixteen.encoder_threads("cuda") == 16 and four.encoder_threads("cuda:0") == 4
    assert [threads.plan(n).interop for n in (1, 2, 3, 4, 8, 9, 16)] == [1, 1, 1, 2, 4, 4, 4]


def run(code: str, env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in (threads.ENV, *threads.LIBRARY_ENV, "OMP_WAIT_POLICY")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, **env, "PYTHONPATH": with_repo_path()}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_configure_reaches_torch_faiss_and_blas() -> None:
    """``pairkit --threads 3``: torch (intra- and inter-op), FAISS's OpenMP and the BLAS
    variables all get 3, whatever was loaded first."""
    code = (
        "import json, os\n"
        "from pairkit.core import threads\n"
        "threads.configure(3)\n"
        "torch = threads.import_torch(); faiss = threads.import_faiss()\n"
        "print(json.dumps({'torch': torch.get_num_threads(),\n"
        "  'interop': torch.get_num_interop_threads(), 'faiss': faiss.omp_get_max_threads(),\n"
        "  'env': [os.environ[v] for v in threads.LIBRARY_ENV],\n"
        "  'wait': os.environ['OMP_WAIT_POLICY']}))\n"
    )
    got = run(code, {})
    assert got == {"torch": 3, "interop": 1, "faiss": 3, "env": ["3"] * 4, "wait": "PASSIVE"}
    # the environment alone (no option): PAIRKIT_THREADS, and libraries loaded before
    code = (
        "import json, torch, faiss\n"
        "from pairkit.core import threads\n"
        "threads.configure(None)\n"
        "print(json.dumps([torch.get_num_threads(), faiss.omp_get_max_threads()]))\n"
    )
    assert run(code, {"PAIRKIT_THREADS": "2"}) == [2, 2]


def test_configure_overrides_library_variables_already_set() -> None:
    """Mutation audit 5a: ``--threads 3`` wins over a BLAS/OpenMP variable the shell
    already set (a child process would otherwise run with the shell's 5 and 7); an
    ``OMP_WAIT_POLICY`` the user chose is kept."""
    code = (
        "import json, os\n"
        "from pairkit.core import threads\n"
        "threads.configure(3)\n"
        "print(json.dumps([os.environ[v] for v in (threads.ENV, *threads.LIBRARY_ENV,\n"
        "  'OMP_WAIT_POLICY')]))\n"
    )
    env = {"PAIRKIT_THREADS": "2", "OMP_NUM_THREADS": "5", "MKL_NUM_THREADS": "7",
           "OPENBLAS_NUM_THREADS": "7", "NUMEXPR_NUM_THREADS": "7", "OMP_WAIT_POLICY": "ACTIVE"}
    assert run(code, env) == ["3", "3", "3", "3", "3", "ACTIVE"]
