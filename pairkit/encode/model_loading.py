"""Loading an encoder's weights, whatever its library: the Hugging Face hub cache first
(then a download unless offline), the libraries' log lines kept quiet, a local
``--checkpoint`` file; the output width of a built module."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from pairkit.encode.weights import WAYS_OUT as WEIGHT_OPTIONS
from pairkit.encode.weights import env_offline
from pairkit.errors import PairkitError

# loggers of the libraries that load weights: quiet while pairkit says what happened
THIRD_PARTY_LOGGERS = ("", "huggingface_hub", "open_clip", "timm", "urllib3", "httpx")


@contextlib.contextmanager
def hub_offline(offline: bool) -> Iterator[None]:
    """Make huggingface_hub use its cache only (no network) inside the block."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - hub is a dependency of open_clip and timm
        yield
        return
    old = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = offline or old
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old


@contextlib.contextmanager
def quiet_third_party() -> Iterator[None]:
    """Silence the warnings and log lines (retries, "initialized randomly", failed
    downloads) of the libraries that load weights; pairkit reports the outcome itself."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in THIRD_PARTY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def load_with_cache_first(build: Any, what: str, offline: bool = False) -> Any:
    """Call ``build()`` with the hub cache only; if the weights are not cached and we
    may go online (``offline`` False and no HF_HUB_OFFLINE), call it again allowing a
    download. One-line error otherwise."""
    import sys

    try:
        with hub_offline(True), quiet_third_party():
            return build()
    except PairkitError:
        raise
    except Exception as first:
        if offline or env_offline():
            raise PairkitError(
                f"the weights of {what} are not in the Hugging Face cache and the hub is out "
                f"of reach: {WEIGHT_OPTIONS}"
            ) from first
    print(f"downloading the weights of {what} (HF_HUB_OFFLINE=1 fails fast instead)",
          file=sys.stderr)
    try:
        with quiet_third_party():
            return build()
    except Exception as exc:
        raise PairkitError(
            f"the weights of {what} could not be downloaded ({first_line(exc)}): "
            f"{WEIGHT_OPTIONS}"
        ) from exc


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, whole (never cut mid-word)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def apply_checkpoint(module: Any, path: str, what: str, identity: dict[str, Any],
                     optional: Any = None) -> list[str]:
    """Load ``path`` into ``module`` (key layouts mapped: pairkit.encode.checkpoints) and
    record its sha256, file name and the layout recognised in ``identity``. ``optional``:
    which of the module's keys the file may lack (:func:`fit_state_dict`); returns those it
    lacks."""
    from pairkit.core.store import sha256_file
    from pairkit.encode.checkpoints import fit_state_dict, load_state_dict

    report = fit_state_dict(load_state_dict(path), module, what, path, optional)
    identity["checkpoint_sha256"] = sha256_file(path)
    identity["checkpoint"] = os.path.basename(path)
    identity["checkpoint_fit"] = report.describe()
    return report.missing_optional


def probe_dim(module: Any, size: int) -> int:
    """The output width of ``module`` on one black ``size`` x ``size`` image."""
    import torch

    with torch.no_grad():
        out = module(torch.zeros(1, 3, size, size))
    return int(out.shape[-1])
