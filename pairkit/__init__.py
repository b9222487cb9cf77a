"""pairkit: the data side of contrastive learning on images.

The Python API (docs/api.md) is :mod:`pairkit.api`, reachable from here:
``pairkit.open_store``, ``embed_images``, ``mine_pairs``, ``find_duplicates``,
``train_head``, ``load_head``, ``evaluate``, ``search``, ``store_info``,
``pairs_to_dataset``, ``pair_loader``, ``vectors``. Names load on first use, so
``import pairkit`` (and ``pairkit --help``) imports none of numpy, pandas or torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

API = (
    "embed_images", "evaluate", "find_duplicates", "find_issues", "import_embeddings",
    "load_head", "mine_pairs", "open_store", "pair_loader", "pairs_to_dataset",
    "project_store", "search", "store_info", "train_head", "vectors",
)
__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    if name in API:
        from pairkit import api

        return getattr(api, name)
    raise AttributeError(f"module 'pairkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API))
