"""Whether two encoder records (a store manifest's ``encoder``, the one a head's
``config.json`` keeps of its training store) name the same encoder: ``eval --against``
compares two stores with it, ``project`` and ``eval --head`` a head and a store."""

from __future__ import annotations

import json
from typing import Any

# Where an imported store's vectors came from, not what made them: two .npy files of one
# encoder (train and test embeddings computed elsewhere) have different names and hashes.
PROVENANCE_KEYS = ("imported_from", "sha256")


def encoder_key(encoder: dict[str, Any]) -> str:
    """The encoder identity two stores must share: the manifest's encoder record without
    its provenance (so the ``--encoder`` name decides for imported stores)."""
    identity = {k: v for k, v in encoder.items() if k not in PROVENANCE_KEYS}
    return json.dumps(identity, sort_keys=True, default=str)


def same_encoder(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when the records ``a`` and ``b`` name one encoder (:func:`encoder_key`)."""
    return encoder_key(a) == encoder_key(b)


def encoder_difference(a: dict[str, Any], b: dict[str, Any], shown: int = 3) -> str:
    """The fields two encoder records differ in, ``name 'x' vs 'y'``, at most ``shown``
    with their values (the records themselves run to hundreds of characters)."""
    keys = sorted(k for k in set(a) | set(b)
                  if k not in PROVENANCE_KEYS and json.dumps(a.get(k), sort_keys=True,
                                                              default=str)
                  != json.dumps(b.get(k), sort_keys=True, default=str))

    def short(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 40 else text[:37] + "..."

    parts = [f"{k} {short(a.get(k))} vs {short(b.get(k))}" for k in keys[:shown]]
    more = f", and {len(keys) - shown} more fields" if len(keys) > shown else ""
    return "; ".join(parts) + more
