"""Query vectors in a store's embedding space: image files through the store's own encoder
(view 0, as ``embed`` renders it) and texts through the text tower of an open_clip store
(``pairkit search``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pairkit.errors import PairkitError, UsageError


def encoder_request(store: Any, device: str, checkpoint: str | None = None) -> Any:
    """The :class:`~pairkit.encode.registry.EncoderRequest` that rebuilds the encoder a
    store was embedded with, from its manifest. A store made with ``--checkpoint`` needs
    the same weights file again (its sha256 is checked); an imported store has no encoder
    pairkit can rebuild (UsageError)."""
    from pairkit.core.integrity import sha256_file
    from pairkit.encode.registry import EncoderRequest

    ident = store.manifest.get("embedding")
    if not isinstance(ident, dict) or "model" not in ident:
        name = store.encoder.get("name", "unknown")
        raise UsageError(f"store {store.root} was not made by pairkit embed (encoder {name!r}): "
                         "image and text queries need its encoder; query by item id instead")
    want = ident.get("checkpoint_sha256")
    if want and checkpoint is None:
        raise UsageError(f"store {store.root} was embedded with --checkpoint "
                         f"{store.encoder.get('checkpoint', '')}: pass the same file with "
                         "--checkpoint")
    if checkpoint is not None:
        if not Path(checkpoint).is_file():
            raise PairkitError(f"checkpoint {checkpoint} not found")
        if want != sha256_file(checkpoint):
            raise UsageError(f"checkpoint {checkpoint} is not the one store {store.root} was "
                             "embedded with (sha256 differs)" if want else
                             f"store {store.root} was not embedded with a checkpoint: drop "
                             "--checkpoint")
    pretrained = ident.get("pretrained")
    return EncoderRequest(str(ident["model"]),
                          None if pretrained in (None, "default") else str(pretrained),
                          checkpoint, device, int(ident.get("seed", 0)),
                          image_size=int(ident["image_size"]) if ident.get("image_size") else None,
                          recorded_preprocess=store.encoder.get("preprocess")
                          if isinstance(store.encoder.get("preprocess"), dict) else None)


def encode_images(request: Any, paths: list[str], batch_size: int = 32) -> np.ndarray:
    """Image files -> (n, dim) float32 L2-normalised rows, as ``embed`` makes view 0 of
    each (decoded with the bomb guard, ``--decode cpu``'s pixels, fp32 autocast off).
    Decoded and encoded ``batch_size`` images at a time, so that the pixels held are one
    block's, whatever the number of queries. PairkitError naming the first file that
    can't be decoded."""
    import torch

    from pairkit.core.store import l2_normalize
    from pairkit.encode.registry import load_encoder

    encoder = load_encoder(request)
    pre = encoder.preprocess
    device = torch.device(request.device)
    module = encoder.module.to(device).eval()
    mean = torch.tensor(pre.mean, device=device).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(pre.std, device=device).view(1, 3, 1, 1) * 255.0
    vecs = np.zeros((0, encoder.dim), np.float32)
    with torch.inference_mode():
        for s in range(0, len(paths), batch_size):
            block = decoded_block(paths[s:s + batch_size], pre)
            x = (torch.from_numpy(block).to(device).float() - mean) / std
            del block
            rows = module(x).float().cpu().numpy()
            if s == 0:  # one array for all rows: no small piece kept per block
                vecs = np.empty((len(paths), rows.shape[1]), np.float32)
            vecs[s:s + len(rows)] = rows
    return l2_normalize(vecs)


def decoded_block(paths: list[str], pre: Any) -> np.ndarray:
    """View 0 of each image file, (len(paths), 3, size, size) uint8 (PairkitError naming
    the first file that can't be decoded)."""
    from pairkit.encode.images import DecodeError, load_image
    from pairkit.encode.views import render_views

    block = np.empty((len(paths), 3, pre.size, pre.size), np.uint8)
    for i, p in enumerate(paths):
        try:
            img, _ = load_image(Path(p), draft_size=2 * pre.size)
        except DecodeError as exc:
            raise PairkitError(f"query image {p}: {exc}") from None
        block[i] = render_views(img, Path(p).name, 1, pre, 0)[0]
    return block


def encode_texts(request: Any, texts: list[str]) -> np.ndarray:
    """Texts -> (n, dim) float32 L2-normalised rows through the open_clip text tower of the
    store's model. UsageError for a store of any other encoder."""
    from pairkit.core.store import l2_normalize
    from pairkit.encode.registry import split_model_name

    prefix, name = split_model_name(request.model)
    if prefix != "openclip":
        raise UsageError(f"text queries need an open_clip store; this one was embedded with "
                         f"{request.model}, which has no text tower")
    from pairkit.encode.openclip import openclip_text_encoder

    return l2_normalize(openclip_text_encoder(name, request)(list(texts)))
