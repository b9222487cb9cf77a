"""Can an encoder's pretrained weights be had? Answered before torch, open_clip or timm
load, in well under 2 s: the Hugging Face hub cache is looked at on disk, the network
with one TCP connect of at most 1 s (never the hub client's retry loop).

Only pure-Python standard-library imports here: ``pairkit embed`` calls this first.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from pairkit.errors import PairkitError, UsageError

WAYS_OUT = ("use --checkpoint FILE (local weights), --pretrained none (random weights) or "
            "--model pixels (weight-free, works offline)")
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PAIRKIT_OFFLINE")
# (library, model, tag) -> Hugging Face repository of the weights, for the models pairkit
# names as defaults (others are looked up by the library itself, cache first)
HUB_REPOS = {
    ("openclip", "ViT-B-32", "laion2b_s34b_b79k"): "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
}


def env_offline(env: dict[str, str] | None = None) -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE, PAIRKIT_OFFLINE) is set."""
    env = os.environ if env is None else env
    return any(env.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in OFFLINE_VARIABLES)


def hub_cache_dir(env: dict[str, str] | None = None) -> Path:
    """The hub cache folder, as huggingface_hub resolves it (HF_HUB_CACHE, HF_HOME/hub,
    XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub)."""
    env = os.environ if env is None else env
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return Path(env[name]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base.expanduser() / "huggingface" / "hub"


def repo_cached(repo_id: str, cache: Path | None = None) -> bool:
    """True when the cache holds a snapshot of ``repo_id`` with at least one file."""
    snapshots = (cache or hub_cache_dir()) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    try:
        return any(f.is_file() for f in snapshots.rglob("*"))
    except OSError:
        return False


def timm_weights_absent(model: str, cache: Path | None = None) -> bool:
    """True when no cache could hold timm ``model``'s weights: no ``timm/<model>.*``
    repository in the hub cache and no file named after it in torch's hub checkpoints
    (where older timm weights are downloaded)."""
    base = model.split(".")[0]
    hub = cache or hub_cache_dir()
    torch_home = Path(os.environ.get("TORCH_HOME") or
                      Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch")
    try:
        for folder in hub.glob(f"models--timm--{base}*"):
            if any(f.is_file() for f in (folder / "snapshots").rglob("*")):
                return False
        checkpoints = torch_home.expanduser() / "hub" / "checkpoints"
        return not any(checkpoints.glob(f"{base}*")) if checkpoints.is_dir() else True
    except OSError:
        return False


def hub_reachable(timeout: float = 1.0) -> bool:
    """One TCP connect to the hub (HF_ENDPOINT's host, else huggingface.co:443), given at
    most ``timeout`` seconds, name lookup included."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    result: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def is_random(tag: str | None) -> bool:
    """``--pretrained none`` (or ``random``): random weights, nothing to load."""
    return tag is not None and tag.lower() in ("none", "random")


def check_weight_options(pretrained: str | None, checkpoint: str | None,
                         tag_for_preprocessing: bool = False) -> None:
    """UsageError for ``--pretrained`` beside ``--checkpoint``: the checkpoint gives the
    weights, so the tag would be ignored (and recorded as if it had counted); and for a
    file named as ``--pretrained``: local weights go through ``--checkpoint`` (their sha256
    recorded and checked), never as a tag recorded by its path.

    ``tag_for_preprocessing`` (open_clip, whose preprocessing belongs to the pretrained
    tag): a tag beside a checkpoint is allowed and names the preprocessing of the file's
    weights; ``none`` beside a checkpoint is still refused."""
    if pretrained is not None and not is_random(pretrained) and Path(pretrained).is_file():
        raise UsageError(f"--pretrained takes a weights tag and {pretrained} is a file: "
                         f"use --checkpoint {pretrained}")
    if tag_for_preprocessing and not is_random(pretrained):
        return
    if pretrained is not None and checkpoint:
        raise UsageError("--pretrained and --checkpoint exclude each other (the checkpoint "
                         f"gives the weights): drop --pretrained {pretrained}")


def timm_source_knows(name: str, pretrained: str | None) -> bool:
    """Whether the installed timm's model sources define model ``name``'s base
    (``def base(``) and name its tag (``'base.tag'``), read as text without importing timm
    (0.14 s for timm 1.0's 3.9 MB of sources). True when they can't be read: only a False
    is acted on (:func:`check_timm_name` then asks timm's registry)."""
    import importlib.util
    import re

    base, _, own_tag = name.partition(".")
    tag = own_tag if pretrained is None or is_random(pretrained) else pretrained
    try:
        spec = importlib.util.find_spec("timm")
        if spec is None or spec.origin is None:
            return True
        texts = [f.read_text(errors="replace")
                 for f in (Path(spec.origin).parent / "models").glob("*.py")]
    except (OSError, ImportError, ValueError):
        return True
    if not texts:
        return True
    defined = re.compile(rf"^def {re.escape(base)}\(", re.M)
    if not any(defined.search(t) for t in texts):
        return False
    return not tag or any(f"'{base}.{tag}'" in t or f'"{base}.{tag}"' in t for t in texts)


def check_timm_name(name: str, pretrained: str | None) -> None:
    """UsageError (one line, as open_clip's) when timm has no model ``name`` (``base`` or
    ``base.tag``) or no pretrained tag ``pretrained`` (else the name's own tag) for it.
    Imports timm (and torch): called on the way to loading, or when the weights are
    missing anyway, never on the fast path of an available model."""
    import timm

    base, _, own_tag = name.partition(".")
    if not base:
        raise UsageError("name the timm model: --model timm/resnet50")
    if not timm.list_models(base):
        raise UsageError(f"timm has no model {base!r} (see timm.list_models())")
    tag = own_tag if pretrained is None or is_random(pretrained) else pretrained
    if is_random(pretrained) or not tag:
        return
    known = [n.partition(".")[2] for n in timm.list_pretrained(f"{base}.*")]
    if tag not in known:
        shown = ", ".join(known[:8]) + (f", ... +{len(known) - 8}" if len(known) > 8 else "")
        raise UsageError(f"timm has no pretrained tag {tag!r} for {base} "
                         f"(known: {shown or 'none'}); {WAYS_OUT}")


def check_pretrained(model: str, pretrained: str | None, checkpoint: str | None,
                     default_tags: dict[str, str]) -> bool:
    """Fail fast (one line, the ways out) when ``model`` needs pretrained weights that are
    not in the hub cache while the hub is out of reach. Returns True when the loader must
    stay offline (cache only, no download attempt), False when it may download.

    ``default_tags``: the open_clip model -> tag used when ``pretrained`` is None.
    """
    library, _, name = model.partition("/")
    if library not in ("openclip", "timm") or checkpoint or is_random(pretrained):
        return False
    tag = pretrained or (default_tags.get(name) if library == "openclip" else None)
    repo = HUB_REPOS.get((library, name, tag or ""))
    if repo is not None and repo_cached(repo):
        return False
    if env_offline():
        reason = "HF_HUB_OFFLINE is set"
    elif not hub_reachable():
        reason = "the Hugging Face hub can't be reached"
    else:
        return False  # online: the library downloads what it lacks
    what = f"{model} ({tag})" if tag else model
    if repo is None and not (library == "timm" and timm_weights_absent(name)):
        return True  # weights we can't locate ourselves: the library looks in its cache only
    if library == "timm" and not timm_source_knows(name, pretrained):
        check_timm_name(name, pretrained)  # a misspelt name or tag is told as such
    raise PairkitError(f"the weights of {what} are not in the Hugging Face cache "
                       f"({hub_cache_dir()}) and {reason}: {WAYS_OUT}")
