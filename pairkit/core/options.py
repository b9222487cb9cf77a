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
    return values


def parse_choices(text: str | None, choices: tuple[str, ...], option: str
                  ) -> tuple[str, ...] | None:
    """``"a,b"`` -> ``("a", "b")`` when each is one of ``choices``; None for None, "",
    ``auto`` or ``all``."""
    if text is None or text.strip() in ("", "auto", "all"):
        return None
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [v for v in values if v not in choices]
    if unknown:
        raise UsageError(f"{option} must be a comma list of {', '.join(choices)}, got "
                         f"{unknown[0]!r}")
    return values


def table_output(path: str) -> str:
    """``path`` when it is ``-`` or names a table format (.parquet, .csv, .jsonl, .ndjson,
    .json); else a UsageError. No pandas import: checked before any work."""
    from pairkit.core.tables import table_kind
    from pairkit.errors import PairkitError

    try:
        table_kind(path)
    except PairkitError as exc:
        raise UsageError(str(exc)) from None
    return path


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,000 rows``."""
    return f"{n:,} {noun if n == 1 else (plural_form or noun + 's')}"
