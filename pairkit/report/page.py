"""The report's ``index.html``: inline CSS and script, data as JSON, a strict CSP.

The Content-Security-Policy allows only the page's own script and style (by
their sha256) and images from the report folder: no network request, no inline
handler, no script that the data could smuggle in can run, even if escaping
failed somewhere. The script reads the JSON block and builds the DOM with
``createElement``/``textContent`` (never ``innerHTML``).
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources
from typing import Any

from pairkit.report.escape import html_text, json_for_script

GENERATOR = "pairkit report"
DATA_ID = "report-data"


def _asset(name: str) -> str:
    return resources.files("pairkit.report").joinpath("assets", name).read_text("utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def content_security_policy(script: str, style: str) -> str:
    """The page's CSP: nothing from the network, only this script and style."""
    return (f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; "
            "img-src 'self' file:; base-uri 'none'; form-action 'none'")


def render_page(data: dict[str, Any], title: str) -> str:
    """The whole ``index.html`` for ``data`` (the JSON the script draws)."""
    script, style = _asset("report.js"), _asset("report.css")
    csp = content_security_policy(script, style)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{html_text(csp)}\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"{GENERATOR}\">\n"
        f"<title>{html_text(title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        "<noscript>This report draws its views with the script inside this file "
        "(no network access); allow JavaScript for file:// pages to see it.</noscript>\n"
        "<main id=\"app\"></main>\n"
        f"<script type=\"application/json\" id=\"{DATA_ID}\">{json_for_script(data)}</script>\n"
        f"<script>{script}</script>\n</body>\n</html>\n"
    )
