"""Values written for a person: numbers next to the limit they passed (never "3.5 > 3.5"
or "50% ... (> 50%)" for a value a hair above its limit), and text from outside (a path, a
label) with its control characters escaped."""

from __future__ import annotations


def shown(value: float) -> str:
    """``value`` in ``%g`` when that is exact, else in full (the threshold as given)."""
    text = f"{value:g}"
    return text if float(text) == value else repr(float(value))


def shown_above(z: float, threshold: float) -> str:
    """``z`` (> ``threshold``) with one decimal, or as many more as it takes to read
    above the threshold (3.52 > 3.5, never 3.5 > 3.5)."""
    for places in range(1, 16):
        text = f"{z:.{places}f}"
        if float(text) > threshold:
            return text
    return repr(float(z))


def percent(share: float) -> str:
    """A limit ``share`` as a percentage in ``%g`` (0.5: ``50%``, 0.5004: ``50.04%``)."""
    return f"{share * 100:g}%"


def percent_above(share: float, limit: float) -> str:
    """``share`` (> ``limit``) as a whole percentage, or with as many decimals as it
    takes to read above ``percent(limit)`` (0.5007 over 0.5: ``50.1%``, never ``50%``)."""
    bound = float(percent(limit)[:-1])
    for places in range(0, 16):
        text = f"{share * 100:.{places}f}"
        if float(text) > bound:
            return text + "%"
    return f"{share * 100!r}%"


def shown_text(text: str) -> str:
    """``text`` as printed for a person: as it is when printable, else quoted with its
    control characters escaped (``ascii``), so a line break or an ESC in a path, a label
    or a name never makes a line of its own or a terminal escape."""
    return text if text.isprintable() else ascii(text)
