"""What a ``mine --ray`` plan with the false-negative rules ships to every block's worker.

The plan of such a run (``pairkit/mine/rules_plan.py``) is made by one Ray task, stays in
Ray's object store and is mapped by every worker that mines a block. This script makes
the plan of a store as a cluster's run would (``mine_parts`` with an executor whose
workers read the store, as Ray's do), pickles it as Ray does, and prints its bytes and
those of each of its parts above 1 MB (deterministic: they do not depend on the machine).
It stops before any block is mined. When the workers search the rules' whitened lists
first (``pairkit/mine/white_parts.py``: an IVF search), their plan's bytes are printed
too (``white``: what each of those workers receives), and its partitions are searched
here, one after the other, so that the plan of the blocks can be made.

Usage: python tests/benchmarks/plan_bytes.py STORE [--no-positives] [--json OUT]
(a generated store: tests/benchmarks/mine_memory.py --store-dir DIR --rows N).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


class Measured(Exception):
    """Raised by the executor once the plan is measured: no block is mined."""


def pickled_bytes(obj: Any) -> int:
    return len(pickle.dumps(obj, protocol=5))


def parts_of(obj: Any, prefix: str, out: dict[str, int], depth: int = 0) -> None:
    """The pickled bytes of ``obj``'s attributes above 1 MB, recursively (4 levels)."""
    if depth > 3 or obj is None:
        return
    names = getattr(obj, "__dataclass_fields__", None) or getattr(obj, "__dict__", {})
    for name in names:
        value = getattr(obj, name, None)
        if value is None or isinstance(value, (int, float, str, bool)):
            continue
        size = pickled_bytes(value)
        if size > 1_000_000:
            out[f"{prefix}.{name}"] = size
            parts_of(value, f"{prefix}.{name}", out, depth + 1)


class PlanOnly:
    """A ``mine`` executor whose workers would read the store (as a Ray cluster's): it
    takes the plan, measures it and stops the run."""

    workers = 2
    workers_read_store = True

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def remote_pair(self, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        job, info = fn(*args)
        if fn.__name__ == "plan_white":  # the whitened lists' plan, then their search
            sizes = {"white": pickled_bytes(job)}
            parts_of(job, "white", sizes)
            self.result["white"] = {"seconds": round(time.perf_counter() - t0, 1),
                                    "bytes": sizes}
            return job, info
        sizes = {"plan": pickled_bytes(job)}
        parts_of(job, "plan", sizes)
        self.result.update(plan_seconds=round(time.perf_counter() - t0, 1), bytes=sizes)
        raise Measured

    def __call__(self, fn: Any, shared: Any, blocks: list[Any]) -> Any:
        if fn.__name__ != "search_white_partition":
            raise AssertionError("no block is mined")
        return (fn(shared, block) for block in blocks)


def main() -> None:
    from pairkit.core.store import Store
    from pairkit.index.options import IndexOptions
    from pairkit.mine.config import MineConfig
    from pairkit.mine.false_negatives import FalseNegativeConfig
    from pairkit.mine.parts_run import mine_parts
    from pairkit.mine.positives import PositiveConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--no-positives", action="store_true")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    rows = Store.open(args.store).count
    executor = PlanOnly()
    with tempfile.TemporaryDirectory() as tmp, contextlib.suppress(Measured):
        mine_parts(args.store, None, MineConfig(num_negatives=5), IndexOptions(),
                   "triplet", str(Path(tmp) / "pairs.parquet"), False, executor,
                   fn_config=FalseNegativeConfig(),
                   positives=PositiveConfig(per_anchor=0 if args.no_positives else 10))
    result = {"rows": rows, **executor.result}
    sizes = {**result.get("white", {}).get("bytes", {}), **result["bytes"]}
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"{name:48s} {size / 1e6:9.2f} MB  {size / rows:7.1f} B/row")
    print(f"the plan made in {result['plan_seconds']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
