// pairkit report: draws the views from the JSON block #report-data.
// Every string from the data goes into the page through textContent or a DOM
// property (title, alt, src of our own thumbnail files); never through innerHTML.
(function () {
  'use strict';

  var SVG = 'http://www.w3.org/2000/svg';
  var COLORS = ['#2f6fb3', '#d9822b', '#c23030', '#2e8b57', '#7a4fb3'];
  var DATA = JSON.parse(document.getElementById('report-data').textContent);
  var ITEMS = DATA.items;

  function el(tag, cls, children) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return node;
  }

  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }

  function num(x) { return x === null || x === undefined ? '-' : Number(x).toLocaleString('en-US'); }
  function score(x) { return x === null || x === undefined ? '-' : Number(x).toFixed(3); }
  function pct(x) { return x === null || x === undefined ? '-' : (100 * x).toFixed(1) + '%'; }
  function tokens(reason) {
    if (reason === null || reason === undefined) return [];
    return String(reason).split('|').map(function (s) { return s.trim(); }).filter(Boolean);
  }

  // ---- shared pieces -------------------------------------------------------
  function placeholder(text) {
    return el('div', 'ph', [text]);
  }

  function card(k, cls, lines) {
    var item = ITEMS[k];
    var fig = el('figure', 'card ' + (cls || ''));
    fig.dataset.id = String(item.id);
    if (item.thumb) {
      var img = document.createElement('img');
      img.loading = 'lazy';
      img.decoding = 'async';
      img.alt = item.path === null ? '' : item.path;
      img.addEventListener('error', function () {
        img.replaceWith(placeholder('thumbnail missing'));
      });
      img.src = item.thumb;
      fig.appendChild(img);
    } else {
      fig.appendChild(placeholder(item.why || 'no image'));
    }
    var path = el('div', 'path', [item.path === null ? '(no path)' : item.path]);
    path.title = item.path === null ? '' : item.path;
    var meta = ['id ' + item.id];
    if (item.view !== null && item.view !== undefined) {
      meta.push('view ' + item.view + (item.view_thumb ? ' (shown as embedded: crop, flip, colour)' : ''));
    }
    var cap = el('figcaption', '', [path, el('div', 'meta', [meta.join(' \u00b7 ')])]);
    if (item.label !== null && item.label !== undefined) {
      var lab = el('div', 'label', ['label ' + item.label]);
      lab.title = item.label;
      cap.appendChild(lab);
    }
    (lines || []).forEach(function (line) { if (line) cap.appendChild(line); });
    fig.appendChild(cap);
    return fig;
  }

  function statTable(rows, head) {
    var table = el('table', 'stats');
    var tr = el('tr');
    head.forEach(function (h) { tr.appendChild(el('th', '', [h])); });
    table.appendChild(el('thead', '', [tr]));
    var body = el('tbody');
    rows.forEach(function (r) {
      var row = el('tr');
      r.forEach(function (c, i) { row.appendChild(el(i ? 'td' : 'th', '', [String(c)])); });
      body.appendChild(row);
    });
    table.appendChild(body);
    return table;
  }

  function histogram(hist, title) {
    var box = el('div', 'hist');
    box.appendChild(el('div', 'hist-title', [title]));
    if (!hist || !hist.series.length) {
      box.appendChild(el('p', 'muted', ['no scores']));
      return box;
    }
    var W = 640, H = 170, L = 40, B = 22, T = 6, R = 8;
    var e = hist.edges, lo = e[0], hi = e[e.length - 1];
    var shares = hist.series.map(function (s) {
      var total = s.counts.reduce(function (a, b) { return a + b; }, 0) || 1;
      return s.counts.map(function (c) { return c / total; });
    });
    var top = Math.max.apply(null, shares.map(function (s) { return Math.max.apply(null, s); })) || 1;
    var x = function (v) { return L + (v - lo) / (hi - lo) * (W - L - R); };
    var y = function (v) { return H - B - v / top * (H - B - T); };
    var root = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img' });
    root.appendChild(svg('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#888' }));
    root.appendChild(svg('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#888' }));
    for (var t = 0; t <= 4; t++) {
      var v = lo + (hi - lo) * t / 4;
      var anchor = t === 0 ? 'start' : (t === 4 ? 'end' : 'middle');
      var label = svg('text', { x: x(v), y: H - 6, 'text-anchor': anchor, 'font-size': 10 });
      label.textContent = v.toFixed(2);
      root.appendChild(label);
    }
    var ytop = svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end', 'font-size': 10 });
    ytop.textContent = pct(top);
    root.appendChild(ytop);
    shares.forEach(function (s, i) {
      var pts = [x(e[0]) + ',' + y(0)];
      s.forEach(function (v, j) {
        pts.push(x(e[j]) + ',' + y(v));
        pts.push(x(e[j + 1]) + ',' + y(v));
      });
      pts.push(x(e[e.length - 1]) + ',' + y(0));
      var color = COLORS[i % COLORS.length];
      root.appendChild(svg('polygon', { points: pts.join(' '), fill: color, 'fill-opacity': 0.18,
                                        stroke: color, 'stroke-width': 1.5 }));
    });
    box.appendChild(root);
    var legend = el('div', 'legend');
    hist.series.forEach(function (s, i) {
      var n = s.counts.reduce(function (a, b) { return a + b; }, 0);
      var key = el('span', 'key');
      key.style.background = COLORS[i % COLORS.length];
      legend.appendChild(el('span', 'legend-item', [key, s.name + ' (n=' + num(n) + ')']));
    });
    box.appendChild(legend);
    box.appendChild(el('div', 'muted small', ['share of each series per bin']));
    return box;
  }

  function control(labelText, input) {
    return el('label', 'ctl', [labelText + ' ', input]);
  }

  function select(cls, options) {
    var s = el('select', cls);
    options.forEach(function (o) {
      var opt = el('option', '', [o[1]]);
      opt.value = o[0];
      s.appendChild(opt);
    });
    return s;
  }

  function numberInput(cls, placeholderText) {
    var i = document.createElement('input');
    i.type = 'number';
    i.step = '0.01';
    i.className = cls;
    i.placeholder = placeholderText;
    return i;
  }

  // A list view with filters, sort and paging: `rowsOf(state)` gives the matching
  // rows in order, `draw(row, state)` one row's element.
  function pagedList(root, state, rowsOf, draw, noun) {
    var status = el('div', 'status');
    var prev = el('button', 'pager-prev', ['\u2190 previous']);
    var next = el('button', 'pager-next', ['next \u2192']);
    var where = el('span', 'pager-where');
    var list = el('div', 'list');
    root.appendChild(el('div', 'pager', [prev, where, next, status]));
    root.appendChild(list);
    var total = 0;
    function redraw() {
      var rows = rowsOf(state);
      total = rows.length;
      var pages = Math.max(1, Math.ceil(total / state.size));
      state.page = Math.min(Math.max(0, state.page), pages - 1);
      var start = state.page * state.size, stop = Math.min(total, start + state.size);
      while (list.firstChild) list.removeChild(list.firstChild);
      rows.slice(start, stop).forEach(function (r) { list.appendChild(draw(r, state)); });
      if (!total) list.appendChild(el('p', 'muted empty', ['no ' + noun + ' match the filters']));
      where.textContent = 'page ' + (state.page + 1) + ' of ' + pages;
      status.textContent = total ? ('showing ' + noun + ' ' + num(start + 1) + '\u2013' + num(stop) +
        ' of ' + num(total) + ' matching') : ('0 ' + noun + ' matching');
      prev.disabled = state.page === 0;
      next.disabled = state.page >= pages - 1;
    }
    prev.addEventListener('click', function () { state.page -= 1; redraw(); });
    next.addEventListener('click', function () { state.page += 1; redraw(); });
    return function () { state.page = 0; redraw(); };
  }

  function bind(input, event, apply, refresh) {
    input.addEventListener(event, function () { apply(input); refresh(); });
  }

  function parseNum(input) {
    var v = input.value.trim();
    if (v === '') return null;
    var f = Number(v);
    return isFinite(f) ? f : null;
  }

  function labelOptions(keys) {
    var seen = new Set();
    keys.forEach(function (k) {
      var l = ITEMS[k].label;
      if (l !== null && l !== undefined) seen.add(l);
    });
    return Array.from(seen).sort();
  }

  // ---- pair tables -----------------------------------------------------------
  function renderPairs(sec, root) {
    var s = sec.summary;
    var cards = [
      ['rows', num(s.rows) + ' (' + s.format + ')'],
      ['anchors', num(s.anchors) + (s.anchors_shown < s.anchors ? ' (' + num(s.anchors_shown) +
        ' sampled, seed ' + s.seed + ')' : ' (all shown)')],
      ['positives', num(s.positives)],
      ['negatives', num(s.negatives)],
      ['flagged as false negatives', s.has_flags ? num(s.flagged) + ' (' +
        pct(s.negatives ? s.flagged / s.negatives : null) + ' of negatives)' :
        'no false_negative column (mined without --fn-mode keep)'],
    ];
    if (s.same_label) {
      cards.push(['negatives sharing the anchor\u2019s label',
        'unflagged ' + pct(s.same_label.unflagged.share) + ' of ' + num(s.same_label.unflagged.n) +
        ', flagged ' + pct(s.same_label.flagged.share) + ' of ' + num(s.same_label.flagged.n)]);
    }
    root.appendChild(summaryCards(cards));
    var reasons = Object.keys(s.reasons);
    if (reasons.length) {
      var chips = el('div', 'chips', [el('span', 'muted', ['flags by rule: '])]);
      reasons.forEach(function (r) { chips.appendChild(el('span', 'chip', [r + ' ' + num(s.reasons[r])])); });
      root.appendChild(chips);
    }
    if (s.row_flags && s.has_flags) {
      root.appendChild(el('p', 'muted small', ['n-tuple table: a flag describes its row as a whole, ' +
        'so every negative of a flagged row is marked']));
    }
    var statRows = [['positive', s.scores.positive], ['negative (unflagged)', s.scores.negative],
                    ['negative (flagged)', s.scores.flagged]].filter(function (r) { return r[1].n; })
      .map(function (r) {
        var v = r[1];
        return [r[0], num(v.n), score(v.min), score(v.q25), score(v.median), score(v.q75), score(v.max)];
      });
    var row = el('div', 'row');
    row.appendChild(histogram(s.hist, 'scores (cosine similarity)'));
    row.appendChild(statTable(statRows, ['scores', 'n', 'min', 'q25', 'median', 'q75', 'max']));
    root.appendChild(row);

    var anchors = sec.anchors;
    var allReasons = new Set();
    anchors.forEach(function (a) {
      a.n.forEach(function (n) { tokens(n[4]).forEach(function (t) { allReasons.add(t); }); });
    });
    var state = { flagged: false, reason: '', min: null, max: null, label: '', text: '',
                  sort: 'id', size: 25, page: 0 };
    var flagged = document.createElement('input');
    flagged.type = 'checkbox';
    flagged.className = 'ctl-flagged';
    var reason = select('ctl-reason', [['', 'any']].concat(Array.from(allReasons).sort().map(function (r) { return [r, r]; })));
    var min = numberInput('ctl-min', 'min');
    var max = numberInput('ctl-max', 'max');
    var labels = labelOptions(anchors.map(function (a) { return a.a; }));
    var label = select('ctl-label', [['', 'any']].concat(labels.map(function (l) { return [l, l]; })));
    var text = document.createElement('input');
    text.type = 'search';
    text.className = 'ctl-text';
    text.placeholder = 'part of a path';
    var sort = select('ctl-sort', [['id', 'anchor id'], ['hardest', 'hardest negative first'],
      ['weakest', 'weakest positive first'], ['flagged', 'most flagged first']]);
    var size = select('ctl-size', [['10', '10'], ['25', '25'], ['50', '50'], ['100', '100']]);
    size.value = '25';
    var controls = el('div', 'controls', [
      control('flagged only', flagged),
      control('rule', reason),
      control('negative score from', min), control('to', max),
    ]);
    if (labels.length) controls.appendChild(control('anchor label', label));
    controls.appendChild(control('path contains', text));
    controls.appendChild(control('sort', sort));
    controls.appendChild(control('per page', size));
    root.appendChild(controls);

    function negOk(n, st) {
      if (st.flagged && !n[3]) return false;
      if (st.reason && tokens(n[4]).indexOf(st.reason) < 0) return false;
      if (st.min !== null && (n[1] === null || n[1] < st.min)) return false;
      if (st.max !== null && (n[1] === null || n[1] > st.max)) return false;
      return true;
    }
    function hasPath(k, t) {
      var p = ITEMS[k].path;
      return p !== null && p.toLowerCase().indexOf(t) >= 0;
    }
    function rowsOf(st) {
      var negFilter = st.flagged || st.reason || st.min !== null || st.max !== null;
      var t = st.text.toLowerCase();
      var out = [];
      anchors.forEach(function (a) {
        if (st.label && ITEMS[a.a].label !== st.label) return;
        var negs = a.n.filter(function (n) { return negOk(n, st); });
        if (negFilter && !negs.length) return;
        if (t && !(hasPath(a.a, t) || a.p.some(function (p) { return hasPath(p[0], t); }) ||
                   negs.some(function (n) { return hasPath(n[0], t); }))) return;
        out.push({ a: a, negs: negs });
      });
      var key = {
        id: function (r) { return ITEMS[r.a.a].id; },
        hardest: function (r) { return -Math.max.apply(null, r.a.n.map(function (n) { return n[1] === null ? -9 : n[1]; }).concat([-9])); },
        weakest: function (r) { return Math.min.apply(null, r.a.p.map(function (p) { return p[1] === null ? 9 : p[1]; }).concat([9])); },
        flagged: function (r) { return -r.a.n.filter(function (n) { return n[3]; }).length; },
      }[st.sort];
      out.sort(function (x, y) { return (key(x) - key(y)) || (ITEMS[x.a.a].id - ITEMS[y.a.a].id); });
      return out;
    }
    function draw(r) {
      var a = r.a;
      var line = el('div', 'anchor');
      line.dataset.anchor = String(ITEMS[a.a].id);
      line.appendChild(card(a.a, 'is-anchor', [el('div', 'role', ['anchor'])]));
      a.p.forEach(function (p) {
        var lines = [el('div', 'role', ['positive \u00b7 score ' + score(p[1])])];
        var item = ITEMS[p[0]], anchor = ITEMS[a.a];
        if (item.path !== null && item.path === anchor.path && item.view !== anchor.view) {
          lines.push(el('div', 'same-file', ['view ' + item.view + ' of the anchor\u2019s file']));
        }
        line.appendChild(card(p[0], 'is-positive', lines));
      });
      r.negs.forEach(function (n) {
        var lines = [el('div', 'role', ['negative \u00b7 score ' + score(n[1]) +
          (n[2] >= 0 ? ' \u00b7 rank ' + n[2] : '')])];
        if (n[3]) {
          var why = tokens(n[4]).join(', ') || 'no reason given';
          var flag = el('div', 'flag', ['false negative: ' + why]);
          flag.title = n[4] === null ? '' : String(n[4]);
          lines.push(flag);
        }
        line.appendChild(card(n[0], n[3] ? 'is-negative is-flagged' : 'is-negative', lines));
      });
      var hidden = a.n.length - r.negs.length;
      if (hidden > 0 || a.more > 0) {
        var parts = [];
        if (hidden > 0) parts.push(hidden + ' negatives hidden by the filters');
        if (a.more > 0) parts.push(a.more + ' more negatives not in the report');
        line.appendChild(el('div', 'more muted', [parts.join('; ')]));
      }
      return line;
    }
    var refresh = pagedList(root, state, rowsOf, draw, 'anchors');
    bind(flagged, 'change', function (i) { state.flagged = i.checked; }, refresh);
    bind(reason, 'change', function (i) { state.reason = i.value; }, refresh);
    bind(min, 'input', function (i) { state.min = parseNum(i); }, refresh);
    bind(max, 'input', function (i) { state.max = parseNum(i); }, refresh);
    bind(label, 'change', function (i) { state.label = i.value; }, refresh);
    bind(text, 'input', function (i) { state.text = i.value.trim(); }, refresh);
    bind(sort, 'change', function (i) { state.sort = i.value; }, refresh);
    bind(size, 'change', function (i) { state.size = Number(i.value) || 25; }, refresh);
    refresh();
  }

  function summaryCards(pairs) {
    var box = el('div', 'cards');
    pairs.forEach(function (p) {
      box.appendChild(el('div', 'summary', [el('div', 'k', [p[0]]), el('div', 'v', [p[1]])]));
    });
    return box;
  }

  // ---- dedup groups ------------------------------------------------------------
  function renderDedup(sec, root) {
    var s = sec.summary;
    var cards = [
      ['groups', num(s.groups) + (s.groups_shown < s.groups ? ' (' + num(s.groups_shown) +
        ' largest shown)' : ' (all shown)')],
      ['sources in groups', num(s.members)],
      ['copies to drop', num(s.drop) + ' (' + num(s.exact) + ' exact, ' + num(s.near) + ' near)'],
      ['largest group', num(s.largest)],
    ];
    if (s.mixed_label_groups !== undefined) {
      cards.push(['groups with more than one label', num(s.mixed_label_groups)]);
    }
    root.appendChild(summaryCards(cards));
    var row = el('div', 'row');
    row.appendChild(histogram(s.hist, 'similarity of each copy to its kept item'));
    var sizes = Object.keys(s.sizes).map(function (k) { return [k + ' members', num(s.sizes[k]) + ' groups']; });
    row.appendChild(statTable(sizes, ['group size', 'count']));
    root.appendChild(row);

    var groups = sec.groups;
    var state = { match: '', mixed: false, text: '', sort: 'size', size: 25, page: 0 };
    var match = select('ctl-match', [['', 'any'], ['exact', 'with exact copies'], ['near', 'with near copies']]);
    var mixed = document.createElement('input');
    mixed.type = 'checkbox';
    mixed.className = 'ctl-mixed';
    var text = document.createElement('input');
    text.type = 'search';
    text.className = 'ctl-text';
    text.placeholder = 'part of a path';
    var sort = select('ctl-sort', [['size', 'largest first'], ['lowest', 'least similar copy first'],
      ['group', 'group number']]);
    var size = select('ctl-size', [['10', '10'], ['25', '25'], ['50', '50'], ['100', '100']]);
    size.value = '25';
    var controls = el('div', 'controls', [control('groups', match)]);
    if (s.mixed_label_groups !== undefined) controls.appendChild(control('mixed labels only', mixed));
    controls.appendChild(control('path contains', text));
    controls.appendChild(control('sort', sort));
    controls.appendChild(control('per page', size));
    root.appendChild(controls);

    function minSim(g) {
      return Math.min.apply(null, g.m.filter(function (m) { return !m[1] && m[2] !== null; })
        .map(function (m) { return m[2]; }).concat([2]));
    }
    function rowsOf(st) {
      var t = st.text.toLowerCase();
      var out = groups.filter(function (g) {
        // match kinds and labels of the whole group (g.x, g.mixed), not only the members shown
        if (st.match && g.x.indexOf(st.match) < 0) return false;
        if (st.mixed && !g.mixed) return false;
        if (t && !g.m.some(function (m) { var p = ITEMS[m[0]].path; return p !== null && p.toLowerCase().indexOf(t) >= 0; })) return false;
        return true;
      });
      var key = {
        size: function (g) { return -g.n; },
        lowest: function (g) { return minSim(g); },
        group: function (g) { return g.g; },
      }[st.sort];
      out.sort(function (x, y) { return (key(x) - key(y)) || (x.g - y.g); });
      return out;
    }
    function draw(g) {
      var line = el('div', 'group');
      line.dataset.group = String(g.g);
      line.appendChild(el('div', 'group-head', ['group ' + g.g + ' \u00b7 ' + num(g.n) + ' members']));
      var row = el('div', 'anchor');
      g.m.forEach(function (m) {
        var role = m[1] ? 'keep' : ('drop \u00b7 ' + (m[3] || 'near') + ' \u00b7 similarity ' + score(m[2]));
        row.appendChild(card(m[0], m[1] ? 'is-keep' : 'is-drop', [el('div', 'role', [role])]));
      });
      line.appendChild(row);
      if (g.more > 0) {
        line.appendChild(el('div', 'more muted', ['and ' + num(g.more) +
          ' more copies not in the report (the least similar are shown)']));
      }
      return line;
    }
    var refresh = pagedList(root, state, rowsOf, draw, 'groups');
    bind(match, 'change', function (i) { state.match = i.value; }, refresh);
    bind(mixed, 'change', function (i) { state.mixed = i.checked; }, refresh);
    bind(text, 'input', function (i) { state.text = i.value.trim(); }, refresh);
    bind(sort, 'change', function (i) { state.sort = i.value; }, refresh);
    bind(size, 'change', function (i) { state.size = Number(i.value) || 25; }, refresh);
    refresh();
  }

  // ---- search results ----------------------------------------------------------
  function renderSearch(sec, root) {
    var s = sec.summary;
    var kinds = Object.keys(s.kinds).map(function (k) { return num(s.kinds[k]) + ' ' + k; });
    root.appendChild(summaryCards([
      ['queries', num(s.queries) + (s.queries_shown < s.queries ? ' (' + num(s.queries_shown) +
        ' shown)' : ' (all shown)')],
      ['query kinds', kinds.join(', ') || '-'],
      ['neighbours', num(s.rows)],
      ['median score', score(s.score.median)],
    ]));
    root.appendChild(histogram(s.hist, 'scores of the neighbours'));
    var state = { text: '', size: 25, page: 0 };
    var text = document.createElement('input');
    text.type = 'search';
    text.className = 'ctl-text';
    text.placeholder = 'part of a query or path';
    var size = select('ctl-size', [['10', '10'], ['25', '25'], ['50', '50']]);
    size.value = '25';
    root.appendChild(el('div', 'controls', [control('contains', text), control('per page', size)]));
    function rowsOf(st) {
      var t = st.text.toLowerCase();
      return sec.queries.filter(function (q) {
        if (!t) return true;
        if (q.q.toLowerCase().indexOf(t) >= 0) return true;
        return q.hits.some(function (h) { var p = ITEMS[h[0]].path; return p !== null && p.toLowerCase().indexOf(t) >= 0; });
      });
    }
    function draw(q) {
      var line = el('div', 'group');
      line.appendChild(el('div', 'group-head', [q.kind + ' query: ' + q.q + ' \u00b7 ' + q.hits.length + ' neighbours']));
      var row = el('div', 'anchor');
      q.hits.forEach(function (h) {
        var role = 'rank ' + h[1] + ' \u00b7 score ' + score(h[2]);
        if (h[3] === false) role += ' \u00b7 other label';
        row.appendChild(card(h[0], h[3] === false ? 'is-flagged' : '', [el('div', 'role', [role])]));
      });
      line.appendChild(row);
      return line;
    }
    var refresh = pagedList(root, state, rowsOf, draw, 'queries');
    bind(text, 'input', function (i) { state.text = i.value.trim(); }, refresh);
    bind(size, 'change', function (i) { state.size = Number(i.value) || 25; }, refresh);
    refresh();
  }

  // ---- eval results --------------------------------------------------------------
  function renderEval(sec, root) {
    if (sec.rows.length) {
      root.appendChild(statTable(sec.rows, ['metric'].concat(sec.columns)));
    }
    sec.plots.forEach(function (p) {
      var img = document.createElement('img');
      img.src = p.file;
      img.alt = p.name;
      img.className = 'plot';
      root.appendChild(el('figure', 'plot-box', [img, el('figcaption', '', [p.name])]));
    });
    if (!sec.rows.length && !sec.plots.length) root.appendChild(el('p', 'muted', ['nothing to show']));
  }

  // ---- page ------------------------------------------------------------------------
  var RENDER = { pairs: renderPairs, dedup: renderDedup, search: renderSearch, eval: renderEval };
  var TITLES = { pairs: 'pairs', dedup: 'duplicates', search: 'search', eval: 'evaluation' };

  function main() {
    var app = document.getElementById('app');
    app.appendChild(el('h1', '', [DATA.title]));
    app.appendChild(el('p', 'muted small', [DATA.generator + ' \u00b7 ' + DATA.created]));
    if (DATA.notes.length) {
      var notes = el('ul', 'notes');
      DATA.notes.forEach(function (n) { notes.appendChild(el('li', '', [n])); });
      app.appendChild(notes);
    }
    var tabs = el('nav', 'tabs');
    var panes = [];
    DATA.sections.forEach(function (sec, i) {
      var pane = el('section', 'pane pane-' + sec.kind);
      pane.dataset.section = String(i);
      var head = el('h2', '', [TITLES[sec.kind] + ': ' + sec.name]);
      pane.appendChild(head);
      if (sec.store) pane.appendChild(el('p', 'muted small', ['store ' + sec.store]));
      RENDER[sec.kind](sec, pane);
      panes.push(pane);
      var tab = el('button', 'tab', [TITLES[sec.kind] + ': ' + sec.name]);
      tab.dataset.section = String(i);
      tab.addEventListener('click', function () { show(i); });
      tabs.appendChild(tab);
    });
    function show(i) {
      panes.forEach(function (p, j) { p.hidden = j !== i; });
      Array.prototype.forEach.call(tabs.children, function (t, j) {
        t.classList.toggle('active', j === i);
      });
    }
    if (panes.length > 1) app.appendChild(tabs);
    panes.forEach(function (p) { app.appendChild(p); });
    if (panes.length) show(0);
    document.body.dataset.ready = '1';
  }

  main();
})();
