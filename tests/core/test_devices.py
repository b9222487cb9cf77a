"""``--device`` and ``--precision`` read without torch (pairkit/core/devices.py)."""

from __future__ import annotations

import pytest

from pairkit.core import devices
from pairkit.errors import PairkitError, UsageError


def test_check_device_takes_only_the_documented_spellings() -> None:
    """Mutation audit 5a: ``cuda:N`` needs a number after the colon."""
    for ok in ("auto", "cpu", "cuda", "cuda:0", "cuda:12"):
        assert devices.check_device(ok) == ok
    for bad in ("cuda:", "cuda:x", "cuda:-1", "gpu", "cpu:0", "CUDA", ""):
        with pytest.raises(UsageError, match="--device must be auto, cpu, cuda or cuda:N"):
            devices.check_device(bad)


def test_hidden_gpus_mean_no_gpu_at_all(monkeypatch) -> None:
    """CUDA_VISIBLE_DEVICES empty or -1 hides every GPU; then cuda and cuda:N fail (exit
    1) before any heavy import, cpu and auto pass."""
    import os.path

    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: True)  # as if a driver were there
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert not devices.no_gpu_at_all()  # can't tell: torch decides
    for hidden in ("", "-1", " -1 "):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert devices.no_gpu_at_all()
    monkeypatch.setattr(os.path, "exists", real_exists)
    for hidden in ("", "-1", " -1 "):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        for gpu in ("cuda", "cuda:0", "cuda:1"):
            with pytest.raises(PairkitError, match=f"--device {gpu}: no CUDA GPU is visible"):
                devices.check_gpu_present(gpu)
        assert devices.check_gpu_present("cpu") == "cpu"
        assert devices.check_gpu_present("auto") == "auto"


def test_where_it_runs_checks_this_machine_only_where_the_work_runs_here(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(PairkitError, match="no CUDA GPU"):
        devices.where_it_runs("cuda")
    with pytest.raises(PairkitError, match="no CUDA GPU"):
        devices.where_it_runs("cuda:0", ray="local", here=True)
    devices.where_it_runs("cuda", ray="local")  # the workers' GPUs count: no check here
    with pytest.raises(UsageError, match="--ray needs an address"):
        devices.where_it_runs("cpu", ray="  ")


def test_auto_precision_is_fp16_on_cuda_and_fp32_elsewhere() -> None:
    assert devices.resolve_precision("auto", "cuda") == "fp16"
    assert devices.resolve_precision("auto", "cpu") == "fp32"
    assert devices.resolve_precision("bf16", "cuda") == "bf16"
    assert devices.resolve_precision("fp32", "cuda") == "fp32"
