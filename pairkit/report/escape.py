"""Escaping for the report page: text in HTML, JSON inside a ``<script>`` block.

Every string that comes from data (paths, labels, reasons, file names) reaches
the page either through :func:`json_for_script` (then the page's script puts it
in the DOM with ``textContent``) or through :func:`html_text`. Nothing from the
data is ever placed in markup unescaped.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

# In a <script type="application/json"> block the HTML parser looks for "</script"
# and "<!--" before JSON.parse ever runs; "<", ">" and "&" as \u escapes can form
# neither, and JSON.parse reads them back as the same characters. U+2028/2029 are
# escaped too so the text stays valid if someone pastes it into JavaScript source.
_SCRIPT_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def _plain(value: Any) -> Any:
    """numpy scalars -> Python, NaN/inf -> None (JSON has neither)."""
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return _finite(value.tolist())  # Python numbers: NaN/inf -> None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_for_script(obj: Any) -> str:
    """``obj`` as JSON that is safe as the text of a ``<script type="application/json">``.

    The result contains no ``<``, ``>`` or ``&`` (so no ``</script>``, ``<!--`` or
    character reference can end or change the block) and no U+2028/2029; NaN and
    infinities become ``null``. ``JSON.parse`` of it gives back ``obj``.
    """
    text = json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"),
                      default=_plain, allow_nan=False)
    return text.translate(_SCRIPT_ESCAPES)


def html_text(value: object) -> str:
    """``str(value)`` escaped for HTML text and quoted attribute values."""
    return html.escape(str(value), quote=True)
