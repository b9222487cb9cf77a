"""Option checks shared by the commands: all raise UsageError (exit code 2)."""

from __future__ import annotations

from typing import Any

from pairkit.errors import UsageError


def only_with(needed: str, given: bool, options: tuple[tuple[str, Any], ...]) -> None:
    """Raise ``UsageError("NAME needs NEEDED")`` for the first option whose value is not
    None while ``needed`` (a flag) was not ``given``."""
    if given:
        return
    for name, value in options:
        if value is not None:
            raise UsageError(f"{name} needs {needed}")


def parse_int_list(text: str, option: str) -> list[int]:
    """Parse ``1,5,10`` into ints, with an error naming ``option``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(
            f"{option} must be a comma-separated list of integers, got {text!r}") from None
    if not values:
        raise UsageError(f"{option} must not be empty")
    twice = first_repeated(values)
    if twice is not None:  # eval's metrics per k would count its hits twice
        raise UsageError(f"{option} lists {twice} twice")
    return values


def parse_all_or_int(text: str, option: str) -> int | None:
    """``all`` -> None, else a whole number >= 0, with an error naming ``option``."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{option} must be all or a whole number, got {text!r}") from None
    if value < 0:
        raise UsageError(f"{option} must be all or >= 0 (0: none), got {value}")
    return value


def first_repeated(values: Any) -> Any:
    """The first of ``values`` that an earlier one equals, or None."""
    seen: list[Any] = []
    for v in values:
        if v in seen:
            return v
        seen.append(v)
    return None


def parse_choices(text: str | None, choices: tuple[str, ...], option: str
                  ) -> tuple[str, ...] | None:
    """``"a,b"`` -> ``("a", "b")`` when each is one of ``choices``, once; None for None,
    ``auto`` or ``all``; an empty list (an unset shell variable) is refused."""
    if text is None or text.strip() in ("auto", "all"):
        return None
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise UsageError(f"{option} must not be empty (auto or all for every one)")
    unknown = [v for v in values if v not in choices]
    if unknown:
        raise UsageError(f"{option} must be a comma list of {', '.join(choices)}, got "
                         f"{unknown[0]!r}")
    twice = first_repeated(values)
    if twice is not None:  # as --knn-k 5,5: eval's metric or map would be run twice
        raise UsageError(f"{option} lists {twice} twice")
    return values


def table_output(path: str) -> str:
    """``path`` when it is ``-`` or names a table format (.parquet, .csv, .jsonl, .ndjson,
    .json); else a UsageError. No pandas import: checked before any work."""
    from pairkit.core.tables import table_kind

    table_kind(path)  # a lookup that fails (object storage unreachable) is exit 1, not usage
    return path


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,000 rows``."""
    return f"{n:,} {noun if n == 1 else (plural_form or noun + 's')}"


# Old spellings (removed without a deprecation period, pairkit is 0.x): the error names the
# new one. And options of pairkit itself given after a command.
RENAMED = {
    "--gpu": "--device cuda", "--no-gpu": "--device cpu", "--float16": "--dtype float16",
    "--keep-flagged": "--fn-mode keep", "--kind": "--index",
    "--fn-community-neighbors": "--fn-community-neighbours",
}
MOVED = {"--threads": "pairkit --threads N COMMAND ..."}
# options of features that were measured and removed
REMOVED = {
    "--fn-support-threshold": "the support rule was removed (docs/benchmarks.md); use "
                              "--fn-rules near-duplicate,mutual-neighbour,cluster",
    "--fn-support-aggregate": "the support rule was removed (docs/benchmarks.md); use "
                              "--fn-rules near-duplicate,mutual-neighbour,cluster",
}


def old_spelling(name: str | None) -> str | None:
    """The message for option ``name`` that a command does not have when it is an old
    spelling (:data:`RENAMED`), a removed feature's or an option of pairkit itself; else
    None (Click's "no such option")."""
    if name in RENAMED:
        return f"{name} was replaced: use {RENAMED[name]}"
    if name in REMOVED:
        return f"{name}: {REMOVED[name]}"
    if name in MOVED:
        return f"{name} is an option of pairkit itself: {MOVED[name]}"
    return None


# the smallest value each numeric option takes, wherever it appears (a value below is bad
# usage, exit 2, checked before any work); every float option must also be a number (NaN
# compares false with every bound, so it slipped through the checks after it)
MINIMUM = {
    "--seed": 0, "--out-dim": 1, "--hidden": 1, "--nprobe": 1, "--exact-max-rows": 0,
    "--ef-search": 1, "--nlist": 1, "--pq-m": 1, "--epochs": 1, "--views": 1,
    "--batch-size": 1, "--shard-rows": 1, "--max-positives": 1, "--pair-sample": 1,
    "--probe-max-train": 1, "--thumb-size": 1, "--max-file-bytes": 1,
    "--hnsw-m": 2,  # FAISS's HNSW crashes the process (assertion, segfault) below 2
    "--limit": 100,  # the demo: --limit 5 failed at its evaluation; 100 runs through
    "--fn-cluster-votes": 1,  # (0 is the config's "chosen by the diffusion" default)
}
# the largest (exclusive): a seed is a 64-bit integer (torch's; mine hashed it to 32 bits)
LIMIT = {"--seed": (2**63, "2**63")}


def check_values(command: Any, params: dict[str, Any]) -> None:
    """Raise UsageError for a value of ``params`` (the parsed options of ``command``) below
    its :data:`MINIMUM` or a float that is NaN or infinite."""
    for param in command.params:
        value = params.get(param.name)
        if value is None or isinstance(value, bool) or not getattr(param, "opts", None):
            continue
        check_value(max(param.opts, key=len), value)


def check_value(name: str, value: Any) -> None:
    """UsageError for the option ``name``'s value when it is a float that is NaN or
    infinite, or a number below its :data:`MINIMUM` (the commands' and the Python API's
    one check)."""
    import math

    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{name} must be a number, got {value}")
    low = MINIMUM.get(name)
    if low is not None and isinstance(value, (int, float)) and value < low:
        raise UsageError(f"{name} must be >= {low}, got {value}")
    high = LIMIT.get(name)
    if high is not None and isinstance(value, (int, float)) and value >= high[0]:
        raise UsageError(f"{name} must be < {high[1]}, got {value}")
