"""Whether two encoder records (a store manifest's ``encoder``, the one a head's
``config.json`` keeps of its training store) name the same encoder: ``eval --against``
compares two stores with it, ``project`` and ``eval --head`` a head and a store."""

from __future__ import annotations

import json
from typing import Any

# Where an imported store's vectors came from, not what made them: two .npy files of one
# encoder (train and test embeddings computed elsewhere) have different names and hashes.
PROVENANCE_KEYS = ("imported_from", "sha256")
# the record of the head that projected a store's vectors (pairkit project), else absent
HEAD_KEY = "head"


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

    def short(key: str, value: Any) -> str:
        if key == HEAD_KEY and value is not None:  # a record of hundreds of characters
            return f"projected by head {projecting_head(value)}"
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 40 else text[:37] + "..."

    parts = [f"{k} {short(k, a.get(k))} vs {short(k, b.get(k))}" for k in keys[:shown]]
    more = f", and {len(keys) - shown} more fields" if len(keys) > shown else ""
    return "; ".join(parts) + more


def projecting_head(record: Any) -> str:
    """The head that projected a store (its encoder record's ``head``, None: none) as
    messages name it: its path, else its weights' sha256."""
    if not isinstance(record, dict):
        return "(unrecorded)" if record is not None else "none"
    path, sha = record.get("path"), record.get("weights_sha256")
    if isinstance(path, str) and path:
        return path
    return f"with weights sha256 {sha}" if isinstance(sha, str) else "(unrecorded)"


def projection_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(a's head record, b's)`` when the records ``a`` and ``b`` name one encoder but
    for the head that projected the vectors (``pairkit project``; None: not projected),
    else None."""
    def base(record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if k != HEAD_KEY}

    if same_encoder(a, b) or not same_encoder(base(a), base(b)):
        return None
    return a.get(HEAD_KEY), b.get(HEAD_KEY)
