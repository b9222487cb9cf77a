"""Projection heads: build, save, load and apply.

A head folder holds ``head.safetensors`` (the weights), ``config.json``
(architecture, loss, options, the store it was trained on), ``train_log.jsonl``
and a plot. :func:`load_head` is the one way to read it back (``project``,
``eval --head``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pairkit.core.atomic import atomic_open, atomic_path
from pairkit.core.devices import host_tensor
from pairkit.core.integrity import read_json_file
from pairkit.errors import PairkitError

if TYPE_CHECKING:
    import torch

    from pairkit.train.output_whitening import Whitening

HEAD_FORMAT = "pairkit-head"
HEAD_FORMAT_VERSION = 2  # 2: may carry an output whitening (output_whitening.py)
WEIGHTS = "head.safetensors"
CONFIG = "config.json"
HEAD_KINDS = ("residual", "linear", "mlp")
RESIDUAL_HIDDEN = 512
MAX_CONFIG_BYTES = 16 << 20


@dataclass(frozen=True)
class HeadSpec:
    """Architecture of a head: ``residual`` (in -> in: the input plus an MLP's correction,
    identity at start; :class:`pairkit.train.modules.ResidualMLP`), ``linear`` (in -> out,
    no bias) or ``mlp`` (in -> hidden -> out)."""

    kind: str
    in_dim: int
    out_dim: int
    hidden: int | None = None

    def check(self) -> None:
        """Raise :class:`PairkitError` naming the first bad field."""
        for name in ("in_dim", "out_dim", "hidden"):
            value = getattr(self, name)
            if not (value is None and name == "hidden") and (
                    not isinstance(value, int) or isinstance(value, bool)):
                raise PairkitError(f"head {name} must be an integer, got {value!r}")
        if self.kind not in HEAD_KINDS:
            raise PairkitError(f"--head must be one of {', '.join(HEAD_KINDS)}, got {self.kind}")
        if self.in_dim < 1:
            raise PairkitError(f"head input dim must be >= 1, got {self.in_dim}")
        if self.out_dim < 1:
            raise PairkitError(f"--out-dim must be >= 1, got {self.out_dim}")
        if self.kind in ("mlp", "residual") and (self.hidden is None or self.hidden < 1):
            raise PairkitError(f"--hidden must be >= 1, got {self.hidden}")
        if self.kind == "residual" and self.out_dim != self.in_dim:
            raise PairkitError(f"a residual head keeps the input dim ({self.in_dim}): "
                               f"--out-dim {self.out_dim} needs --head mlp or linear")


def build_module(spec: HeadSpec) -> torch.nn.Module:
    """The torch module for ``spec`` (weights from torch's current RNG)."""
    import torch

    spec.check()
    if spec.kind == "residual":
        from pairkit.train.modules import ResidualMLP

        assert spec.hidden is not None
        return ResidualMLP(spec.in_dim, spec.hidden)
    if spec.kind == "linear":
        return torch.nn.Sequential(torch.nn.Linear(spec.in_dim, spec.out_dim, bias=False))
    assert spec.hidden is not None
    return torch.nn.Sequential(
        torch.nn.Linear(spec.in_dim, spec.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(spec.hidden, spec.out_dim),
    )


def save_weights(folder: Path, module: torch.nn.Module) -> None:
    """Write ``head.safetensors`` atomically (float32, CPU tensors)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().float().cpu().contiguous() for k, v in module.state_dict().items()}
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(tensors, str(tmp))


def write_config(folder: Path, config: dict[str, Any]) -> None:
    """Write ``config.json`` atomically."""
    with atomic_open(folder / CONFIG) as fh:
        json.dump(config, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


class Head:
    """A trained head, ready to project vectors. Read one with :func:`load_head`."""

    def __init__(self, path: Path, spec: HeadSpec, module: torch.nn.Module,
                 config: dict[str, Any],
                 whitening: Whitening | None = None) -> None:
        self.path = path
        self.spec = spec
        self.module = module.eval()
        self.config = config
        self.whitening = whitening  # (mean, projection) applied after the module, or None

    @property
    def in_dim(self) -> int:
        return self.spec.in_dim

    @property
    def out_dim(self) -> int:
        """Dim of :meth:`apply`'s rows: the whitening's when the head has one."""
        return self.spec.out_dim if self.whitening is None else self.whitening[1].shape[1]

    @property
    def complete(self) -> bool:
        """False when training stopped before its last epoch (weights of the last epoch done)."""
        return bool(self.config.get("complete", False))

    def apply(self, vectors: np.ndarray, device: str = "cpu",
              batch_size: int = 65536) -> np.ndarray:
        """Project ``vectors`` (n, in_dim) -> float32 (n, out_dim), rows L2-normalised:
        the module's outputs, L2-normalised, then (when the head has one) the output
        whitening (:func:`pairkit.train.output_whitening.whiten`). PairkitError when a row
        comes out non-finite or all zeros (:func:`check_outputs`)."""
        from pairkit.core.threads import import_torch
        from pairkit.train.output_whitening import whiten

        torch = import_torch()

        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.in_dim:
            raise PairkitError(
                f"head {self.path} takes vectors of dim {self.in_dim}, got shape "
                f"{tuple(vectors.shape)}"
            )
        if batch_size < 1:
            raise PairkitError(f"batch_size must be >= 1, got {batch_size}")
        out = np.empty((len(vectors), self.out_dim), dtype=np.float32)
        module = self.module.to(device)
        white = None if self.whitening is None else tuple(
            torch.from_numpy(a).to(device) for a in self.whitening)
        with torch.no_grad():
            for start in range(0, len(vectors), batch_size):
                block = host_tensor(
                    np.array(vectors[start : start + batch_size], dtype=np.float32, order="C")
                ).to(device)
                z = torch.nn.functional.normalize(module(block).float(), dim=1)
                if white is not None:
                    z = whiten(z, *white)
                check_outputs(self.path, z)
                out[start : start + len(block)] = z.cpu().numpy()
        return out


def check_outputs(path: Path, z: torch.Tensor) -> None:
    """PairkitError when a head's output rows ``z`` are not finite (weights that overflow)
    or one is all zeros (no direction: a damaged whitening): such rows are no vectors to
    search or write."""
    import torch

    if not bool(torch.isfinite(z).all()):
        raise PairkitError(f"head {path} produces non-finite outputs (its weights overflow "
                           "or are damaged): retrain the head")
    if len(z) and not bool((z.abs().amax(dim=1) > 0).all()):
        raise PairkitError(f"head {path} produces zero outputs (rows with no direction: its "
                           "weights or whitening are damaged): retrain the head")


def load_head(path: str | os.PathLike[str]) -> Head:
    """Open a head folder written by ``pairkit train``; raise PairkitError naming the problem."""
    root, config, spec = read_head_config(path)
    import torch
    from safetensors.torch import load_file

    state = read_tensor_file(root, WEIGHTS, load_file)
    bad = sorted(k for k, v in state.items() if not bool(torch.isfinite(v).all()))
    if bad:
        raise PairkitError(f"head {root}: {WEIGHTS} holds non-finite weights ({bad[0]}): it "
                           "is damaged; retrain the head")
    with torch.device("meta"):  # the shapes config.json asks for, nothing allocated
        want = {k: tuple(v.shape) for k, v in build_module(spec).state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if want != got:
        key = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))[0]
        raise PairkitError(f"head {root}: weights don't match config.json ({key}: shape "
                           f"{got.get(key)} in {WEIGHTS}, {want.get(key)} by config.json)")
    module = build_module(spec)
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise PairkitError(f"head {root}: weights don't match config.json ({first})") from None
    module = module.to(torch.float32)
    whitening = None
    if config.get("whitening"):
        from pairkit.train.output_whitening import load_output_whitening

        whitening = load_output_whitening(root, spec.out_dim, int(config["whitening"]["dims"]))
    return Head(root, spec, module, config, whitening)


def read_tensor_file(root: Path, name: str, load: Callable[[str], dict[str, Any]]
                     ) -> dict[str, Any]:
    """The tensors of the head folder's safetensors file ``name``, read by ``load``
    (safetensors' numpy or torch ``load_file``); PairkitError when missing or unreadable."""
    from safetensors import SafetensorError

    path = root / name
    if not path.is_file():
        raise PairkitError(f"head {root}: {name} is missing")
    try:
        return load(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise PairkitError(f"head {root}: {name} is unreadable ({exc})") from None


def read_head_config(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any], HeadSpec]:
    """``(folder, config, spec)`` of a head folder, checked without torch: commands call it
    first, so a wrong ``--head`` is refused before anything heavy loads."""
    from pairkit.core.remote import check_local_only

    check_local_only(path, "head")  # a head is a local folder: not "not found" for a URL
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise PairkitError(f"head {root} is a file, expected a head folder (written by "
                           "pairkit train)")
    if not root.is_dir():
        raise PairkitError(f"head {root} not found (expected a folder written by pairkit train)")
    cfg_path = root / CONFIG
    if not cfg_path.is_file():
        raise PairkitError(f"{root} is not a pairkit head: no {CONFIG}")
    try:
        config = read_json_file(cfg_path, MAX_CONFIG_BYTES, "head config")
    except (OSError, PairkitError) as exc:
        raise PairkitError(f"head {root}: {CONFIG} is unreadable ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != HEAD_FORMAT:
        raise PairkitError(f"{cfg_path} is not a pairkit head config")
    version = config.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise PairkitError(f"{cfg_path}: format_version must be an integer, got {version!r}")
    if version > HEAD_FORMAT_VERSION:
        raise PairkitError(
            f"head {root} has format version {config.get('format_version')}; this pairkit reads "
            f"up to {HEAD_FORMAT_VERSION}: upgrade pairkit"
        )
    try:
        spec = HeadSpec(**config["head"])
        spec.check()
    except (KeyError, TypeError, PairkitError) as exc:
        raise PairkitError(f"head {root}: {CONFIG} has a bad 'head' entry ({exc})") from None
    white = config.get("whitening")
    if white is not None and not (isinstance(white, dict) and isinstance(white.get("dims"), int)
                                  and not isinstance(white["dims"], bool)
                                  and 1 <= white["dims"] <= spec.out_dim):
        raise PairkitError(f"head {root}: {CONFIG} has a bad 'whitening' entry ({white!r})")
    return root, config, spec


def spec_dict(spec: HeadSpec) -> dict[str, Any]:
    """``spec`` as the JSON object stored under ``head`` in config.json."""
    return asdict(spec)


def check_head_encoder(root: str | os.PathLike[str], config: dict[str, Any],
                       store_encoder: dict[str, Any], store_name: str) -> None:
    """UsageError when the head at ``root`` (its ``config``) was trained on a store of
    another encoder than ``store_encoder`` (the store ``store_name``'s), compared as
    ``eval --against`` compares two stores (:func:`pairkit.core.encoder_match.same_encoder`).
    A head written before its config recorded the encoder is not checked. Records that
    differ only in the head that projected the vectors (``pairkit project``: a projected
    store has the dim of a head whose output dim is its input's) are said so."""
    from pairkit.core.encoder_match import (
        encoder_difference,
        projecting_head,
        projection_difference,
        same_encoder,
    )
    from pairkit.errors import UsageError

    trained = config.get("store")
    encoder = trained.get("encoder") if isinstance(trained, dict) else None
    if not isinstance(encoder, dict) or same_encoder(encoder, store_encoder):
        return
    heads = projection_difference(encoder, store_encoder)
    if heads is not None:
        names = [projecting_head(h) for h in heads]
        if names[0] == names[1] and all(isinstance(h, dict) for h in heads):
            # one path, other weights (a head trained again in place)
            names = [f"{n} (weights sha256 {str(h.get('weights_sha256'))[:12]})"
                     for n, h in zip(names, heads, strict=True)]

        def vectors(n: int) -> str:
            return ("unprojected vectors" if heads[n] is None
                    else f"vectors projected by head {names[n]}")

        where = ("the store they were projected from" if heads[0] is None
                 else f"a store projected by head {names[0]}")
        raise UsageError(f"head {root} was trained on {vectors(0)}, but store "
                         f"{store_name} holds {vectors(1)} (pairkit project): apply "
                         f"it to {where}")
    raise UsageError(f"head {root} was trained on vectors of another encoder than store "
                     f"{store_name}'s ({encoder_difference(encoder, store_encoder)}): train a "
                     "head on this store's encoder")
