"""The report in a real browser: headless Chromium through the DevTools protocol.

Skipped only where Chromium is not installed (Debian package ``chromium``;
``.ci/run`` installs it, so CI always runs these).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from tests.report.browser import Browser, chromium_path
from tests.report.kit import BROKEN, HOSTILE_LABELS, HOSTILE_REASON, HOSTILE_TITLE, hostile_kit

CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run "
    "installs it)")
runner = CliRunner()


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM is not None
    b = Browser(CHROMIUM, timeout=60)
    b.call("Network.enable", session=True)
    yield b
    b.close()


def build(*args: object) -> Path:
    result = runner.invoke(app, ["report", *map(str, args)])
    assert result.exit_code == 0, result.output
    out = Path(str(args[args.index("-o") + 1]))
    return out / "index.html"


def load(browser: Browser, index: Path) -> None:
    browser.errors.clear()
    mark = len(browser.events)
    browser.open(index.as_uri())
    browser.wait_for("document.body.dataset.ready === '1'")
    # every thumbnail and plot decodes (lazy images are made eager for the check)
    failed = browser.js("""Promise.all([...document.images].map(i => { i.loading = 'eager';
        return i.decode().then(() => i.naturalWidth > 0 ? null : i.getAttribute('src'),
                               () => i.getAttribute('src')); })).then(r => r.filter(Boolean))""")
    assert failed == []
    urls = [e["params"]["request"]["url"] for e in browser.events[mark:]
            if e["method"] == "Network.requestWillBeSent"]
    assert urls and all(u.startswith("file://") for u in urls), urls  # no network at all


def visible_state(browser: Browser, pane: str) -> dict:
    return browser.js(f"""(() => {{
        const p = document.querySelector('.pane-{pane}');
        return {{
          status: p.querySelector('.status').textContent,
          where: p.querySelector('.pager-where').textContent,
          rows: [...p.querySelectorAll('.list > .anchor, .list > .group')].map(
                  r => r.dataset.anchor || r.dataset.group),
          negatives: p.querySelectorAll('.card.is-negative').length,
          flagged: p.querySelectorAll('.card.is-flagged').length,
          scores: [...p.querySelectorAll('.card.is-negative .role')].map(
                  r => parseFloat(r.textContent.split('score ')[1])),
        }}; }})()""")


def js_set(browser: Browser, selector: str, value: str, event: str) -> None:
    browser.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        e.value = {json.dumps(value)}; e.dispatchEvent(new Event('{event}')); }})()""")


def test_pipeline_report_renders_filters_and_pages(browser, pipeline, tmp_path):
    index = build(pipeline.pairs, pipeline.duplicates, pipeline.eval_json, pipeline.plots,
                  "-o", tmp_path / "rep")
    load(browser, index)
    shot = Image.open(io.BytesIO(browser.screenshot(tmp_path / "shot.png").read_bytes()))
    colours = shot.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, cards, thumbnails: not blank
    white = max(count for count, rgb in colours if rgb == (255, 255, 255))
    assert white < 0.97 * shot.width * shot.height

    first = visible_state(browser, "pairs")
    assert first["where"].startswith("page 1 of ") and len(first["rows"]) == 25
    assert first["negatives"] > first["flagged"] > 0
    # paging
    browser.js("document.querySelector('.pane-pairs .pager-next').click()")
    second = visible_state(browser, "pairs")
    assert second["where"].startswith("page 2 of ")
    assert second["rows"] and not set(second["rows"]) & set(first["rows"])
    browser.js("document.querySelector('.pane-pairs .pager-prev').click()")
    assert visible_state(browser, "pairs")["rows"] == first["rows"]
    # flagged only: only flagged negatives, fewer anchors or the same
    browser.js("document.querySelector('.pane-pairs .ctl-flagged').click()")
    flagged = visible_state(browser, "pairs")
    assert flagged["negatives"] == flagged["flagged"] > 0
    assert flagged["negatives"] < first["negatives"]
    browser.js("document.querySelector('.pane-pairs .ctl-flagged').click()")
    # score range
    scores = sorted(s for s in first["scores"])
    cut = scores[len(scores) // 2]
    js_set(browser, ".pane-pairs .ctl-min", f"{cut:.3f}", "input")
    ranged = visible_state(browser, "pairs")
    assert ranged["scores"] and min(ranged["scores"]) >= round(cut, 3) - 1e-3
    assert ranged["status"] != first["status"] or ranged["scores"] != first["scores"]
    js_set(browser, ".pane-pairs .ctl-min", "", "input")
    # label filter: every anchor shown has that label
    js_set(browser, ".pane-pairs .ctl-label", "class1", "change")
    labels = browser.js("""[...document.querySelectorAll('.pane-pairs .card.is-anchor .label')]
        .map(e => e.textContent)""")
    assert labels and set(labels) == {"label class1"}
    js_set(browser, ".pane-pairs .ctl-label", "", "change")
    # sort: hardest negative first
    js_set(browser, ".pane-pairs .ctl-size", "100", "change")
    js_set(browser, ".pane-pairs .ctl-sort", "hardest", "change")
    hardest = browser.js("""[...document.querySelectorAll('.pane-pairs .list > .anchor')].map(
        r => Math.max(...[...r.querySelectorAll('.is-negative .role')].map(
        e => parseFloat(e.textContent.split('score ')[1]))))""")
    assert hardest == sorted(hardest, reverse=True)
    # dedup tab
    browser.js("document.querySelector('.tab[data-section=\"1\"]').click()")
    assert browser.js("document.querySelector('.pane-pairs').hidden") is True
    groups = visible_state(browser, "dedup")
    assert groups["rows"] and browser.js(
        "document.querySelectorAll('.pane-dedup .card.is-keep').length") == len(groups["rows"])
    # eval tab: the metrics table and both plots
    browser.js("document.querySelector('.tab[data-section=\"2\"]').click()")
    assert browser.js("document.querySelectorAll('.pane-eval img.plot').length") == 2
    assert "kNN top-1 (first k)" in browser.js("document.querySelector('.pane-eval').textContent")
    assert browser.errors == []


def test_hostile_names_render_as_text(browser, tmp_path):
    store, pairs, dedup, images, paths = hostile_kit(tmp_path)
    index = build(pairs, dedup, "-o", tmp_path / "rep", "--title", HOSTILE_TITLE)
    load(browser, index)
    js_set(browser, ".pane-pairs .ctl-size", "100", "change")
    page = browser.js("""(() => {
      const all = (q, f) => [...document.querySelectorAll(q)].map(f);
      const text = e => e.textContent;
      return {
        pwned: window.__pwned === undefined ? null : window.__pwned,
        title: document.title,
        h1: document.querySelector('h1').textContent,
        scripts: document.scripts.length,
        handlers: document.querySelectorAll('[onerror],[onload],[onclick]').length,
        strays: document.querySelectorAll(
          'main b, main script, .card svg, .list img:not([src^="t/"])').length,
        paths: all('.pane-pairs .card.is-anchor .path', text),
        labels: all('.pane-pairs .card .label', text),
        flags: all('.pane-pairs .card .flag', e => e.title),
        placeholders: all('.pane-pairs .card .ph', text),
        reasons: all('.pane-pairs .ctl-reason option', o => o.value),
      }; })()""")
    assert page["pwned"] is None
    assert page["title"] == page["h1"] == HOSTILE_TITLE
    assert page["scripts"] == 2 and page["handlers"] == 0 and page["strays"] == 0
    assert sorted(page["paths"]) == sorted(paths)  # newline, quotes, unicode: as they are
    assert set(page["labels"]) == {f"label {lab}" for lab in HOSTILE_LABELS}
    assert set(page["flags"]) == {HOSTILE_REASON}
    assert sorted(page["reasons"]) == sorted(["", *HOSTILE_REASON.split("|")])
    for reason in set(BROKEN.values()):
        assert any(reason in text for text in page["placeholders"]), reason
    # filtering by the hostile rule is plain string matching
    js_set(browser, ".pane-pairs .ctl-reason", "<svg onload=window.__pwned=4>", "change")
    state = visible_state(browser, "pairs")
    assert state["negatives"] == state["flagged"] == len(paths)
    js_set(browser, ".pane-pairs .ctl-reason", "", "change")
    js_set(browser, ".pane-pairs .ctl-text", "日本", "input")
    rows = browser.js("[...document.querySelectorAll('.pane-pairs .list > .anchor')]"
                      ".map(r => r.textContent)")
    assert 0 < len(rows) < len(paths) and all("日本" in r for r in rows)
    assert browser.js("window.__pwned === undefined") is True
    assert browser.errors == []


def test_a_positive_view_of_the_anchors_file_is_shown_as_that_view(browser, pipeline, tmp_path):
    """Issue 20.13: two views of one file were the same thumbnail twice."""
    index = build(pipeline.pairs, "-o", tmp_path / "rep")
    load(browser, index)
    js_set(browser, ".pane-pairs .ctl-size", "100", "change")
    rows = browser.js("""[...document.querySelectorAll('.pane-pairs .list > .anchor')].map(r => {
        const a = r.querySelector('.card.is-anchor');
        return {a: a.querySelector('img').getAttribute('src'),
                apath: a.querySelector('.path').textContent,
                p: [...r.querySelectorAll('.card.is-positive')].map(c => ({
                  src: c.querySelector('img').getAttribute('src'),
                  path: c.querySelector('.path').textContent,
                  meta: c.querySelector('.meta').textContent,
                  same: (c.querySelector('.same-file') || {}).textContent || null}))}; })""")
    same = [(r, p) for r in rows for p in r["p"] if p["path"] == r["apath"]]
    assert len(same) >= 16  # every anchor's positive is its file's other view (instance)
    for row, p in same:
        assert p["src"] != row["a"]
        view = int(p["meta"].split("view ")[1].split()[0])
        assert p["same"] == f"view {view} of the anchor\u2019s file"
        if view >= 1:
            assert "(shown as embedded: crop, flip, colour)" in p["meta"]
    assert browser.errors == []


def test_a_capped_dedup_group_says_how_many_more(browser, tmp_path):
    """A group of 100 shows 65 cards and 'and 35 more copies'; its size sorts and reads as
    100, and the exact-copies filter finds it by a copy that is not shown."""
    import pandas as pd

    n = 100
    sim = [1.0, *[0.99 - i / 1000 for i in range(n - 1)]]  # id 1 most similar (not shown)
    match = ["keep", "exact", *["near"] * (n - 2)]
    small = pd.DataFrame({"group": [1] * 3, "id": [n, n + 1, n + 2],
                          "path": ["s0.png", "s1.png", "s2.png"], "keep": [True, False, False],
                          "similarity": [1.0, 0.5, 0.6], "match": ["keep", "near", "near"]})
    table = pd.concat([pd.DataFrame({"group": 0, "id": range(n),
                                     "path": [f"p{i}.png" for i in range(n)],
                                     "keep": [True] + [False] * (n - 1), "similarity": sim,
                                     "match": match}), small], ignore_index=True)
    table.to_csv(tmp_path / "d.csv", index=False)
    load(browser, build(tmp_path / "d.csv", "-o", tmp_path / "rep"))
    state = visible_state(browser, "dedup")
    assert state["rows"] == ["0", "1"]
    text = browser.js("""[...document.querySelectorAll('.pane-dedup .list > .group')].map(
        g => [g.querySelector('.group-head').textContent, g.querySelectorAll('.card').length,
              (g.querySelector('.more') || {textContent: ''}).textContent])""")
    assert text[0][0].endswith("100 members") and text[0][1] == 65
    assert text[0][2].startswith("and 35 more copies not in the report")
    assert text[1][1] == 3 and text[1][2] == ""
    js_set(browser, ".pane-dedup .ctl-match", "exact", "change")
    assert visible_state(browser, "dedup")["rows"] == ["0"]
    assert browser.errors == []
