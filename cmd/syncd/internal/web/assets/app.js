// syncd's page. It reads the JSON API of its own origin (the path is in
// <body data-api>) every 2 seconds and draws what it gets: counts, two
// inline-SVG charts, the items tables, item detail and owners. Writes are
// POSTs with the bearer token typed into the page, kept in sessionStorage.
// Plain JavaScript, no build step, nothing from other origins; all text
// goes in through textContent, never as HTML.
'use strict';

(function () {
  const API = document.body.dataset.api || '/api/v1';
  const POLL_MS = 2000;
  const PAGE_SIZE = 50;
  const TOKEN_KEY = 'syncd.token';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const STATE_NAMES = { due: 'due', in_flight: 'in flight', backing_off: 'backing off', quarantined: 'quarantined', waiting: 'waiting', idle: 'idle' };
  const ACTIONS = {
    requeue: { path: '/items/requeue', verb: 'Requeue', done: (r) => `requeued ${r.requeued}` + listed(' unknown', r.unknown) },
    release: { path: '/items/release', verb: 'Force release', done: (r) => `released ${r.released}` + listed(' not held', r.not_held) +
      listed(' unknown', r.unknown) + listed(' failed', Object.keys(r.failed || {})) },
    sync: { path: '/items/sync', verb: 'Sync now', done: (r) => `triggered ${r.triggered}` + listed(' unknown', r.unknown) },
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $('refresh-status'), updated: $('updated'), pause: $('pause'), message: $('message'),
    tokenBox: $('token-box'), token: $('token'),
  };
  const page = { view: 'summary', itemId: '', paused: false, writable: false, timer: 0, live: '', busy: false };

  // ---- formatting ----

  function fmtNum(n) { return typeof n === 'number' ? n.toLocaleString('en-US') : '–'; }

  // fmtDur writes a duration in ms the way a person reads it: 850 ms,
  // 4.2 s, 3 m 05 s, 2 h 10 m, 3 d 4 h.
  function fmtDur(ms) {
    if (typeof ms !== 'number' || !isFinite(ms)) return '–';
    if (ms < 0) ms = 0;
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.floor(s)) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' m ' + String(Math.floor(s % 60)).padStart(2, '0') + ' s';
    const h = Math.floor(m / 60);
    if (h < 24) return h + ' h ' + String(m % 60).padStart(2, '0') + ' m';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }

  // Fences are opaque increasing numbers, often 16 digits: shown whole,
  // without separators, to compare with status and the logs.
  function fmtFence(n) { return typeof n === 'number' && n > 0 ? String(n) : '–'; }

  function fmtTime(ms) {
    if (!ms) return '–';
    const d = new Date(ms);
    if (new Date().toDateString() === d.toDateString()) return d.toLocaleTimeString('en-GB');
    return d.toLocaleString('en-GB');
  }

  function listed(label, ids) {
    return ids && ids.length ? `;${label}: ${ids.slice(0, 5).join(', ')}${ids.length > 5 ? ' …' : ''}` : '';
  }

  // el makes an element: el('td', {class: 'num'}, 'text', child, ...).
  // Attributes with value false, null or undefined are left out.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === false || v === null || v === undefined) continue;
      e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function itemLink(id) {
    return el('a', { href: '#item/' + encodeURIComponent(id), class: 'id-link', 'data-testid': 'item-link' }, id);
  }

  function stateBadge(s) { return el('span', { class: 'state ' + s, 'data-testid': 'state' }, STATE_NAMES[s] || s); }

  // ---- talking to the API ----

  async function call(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (method === 'POST') {
      const token = ui.token.value.trim();
      if (!token) throw new Error('type the API token first (field "API token" at the top)');
      headers['Content-Type'] = 'application/json';
      headers.Authorization = 'Bearer ' + token;
    }
    const r = await fetch(API + path, { method, headers, body: body && JSON.stringify(body), cache: 'no-store', credentials: 'omit' });
    let data = null;
    try { data = await r.json(); } catch (e) { /* not JSON: the status says enough */ }
    if (!r.ok) {
      const err = new Error((data && data.error) || `${r.status} ${r.statusText}`);
      err.status = r.status;
      err.data = data;
      throw err;
    }
    return data;
  }

  function say(text, kind) {
    ui.message.textContent = text;
    ui.message.className = 'message ' + (kind || '');
    ui.message.hidden = !text;
  }

  // act runs an action on ids after the operator confirms it.
  async function act(action, ids) {
    const a = ACTIONS[action];
    if (!a || ids.length === 0) return false;
    const shown = ids.slice(0, 10).join('\n') + (ids.length > 10 ? `\n… and ${ids.length - 10} more` : '');
    if (!window.confirm(`${a.verb} ${ids.length} item${ids.length === 1 ? '' : 's'}?\n\n${shown}`)) return false;
    try {
      const r = await call('POST', a.path, { ids });
      say(`${a.verb}: ${a.done(r)}.`, 'ok');
    } catch (e) {
      if (e.status === 404 && e.data && e.data.unknown) {
        // Unknown IDs: the known ones were acted on all the same.
        say(`${a.verb}: ${a.done(e.data)}. ${e.message}.`, 'error');
      } else {
        const hint = e.status === 401 ? ' Check the API token.' : '';
        say(`${a.verb} failed: ${e.message}.${hint}`, 'error');
      }
    }
    refreshNow();
    return true;
  }

  // ---- charts ----

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function fmtAgo(ms) {
    if (ms <= 0) return 'now';
    return ms >= 60000 ? `-${Math.round(ms / 6000) / 10}m` : `-${Math.round(ms / 1000)}s`;
  }

  // lineChart draws series ([{name, values: [[t_ms, v]...]}]) from t0 to
  // now into box as an SVG sized to the box's width.
  function lineChart(box, series, now, labelledBy, digits) {
    const all = series.flatMap((s) => s.values);
    box.replaceChildren();
    if (all.length < 2) {
      box.append(el('p', { class: 'empty' }, 'Not enough history yet: samples come every 2 s.'));
      return;
    }
    const W = Math.max(280, Math.floor(box.clientWidth || 600)), H = 180;
    const L = 44, R = 10, T = 10, B = 22;
    const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(now, ...all.map((p) => p[0]));
    const ymax = niceMax(Math.max(...all.map((p) => p[1])));
    const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    const latest = series.map((s) => `${s.name} ${s.values.length ? fmtY(s.values[s.values.length - 1][1], digits) : '–'}`).join(', ');
    const root = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': labelledBy + ' ' + labelledBy + '-desc' });
    root.append(svg('desc', { id: labelledBy + '-desc' }, `latest: ${latest}`));
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4, yy = y(v);
      root.append(svg('line', { class: i === 0 ? 'axis' : 'grid', x1: L, x2: W - R, y1: yy, y2: yy }));
      root.append(svg('text', { x: L - 6, y: yy + 4, 'text-anchor': 'end' }, fmtY(v, digits)));
    }
    for (const f of [0, 0.5, 1]) {
      const t = t0 + f * (t1 - t0);
      root.append(svg('text', { x: x(t), y: H - 6, 'text-anchor': f === 0 ? 'start' : f === 1 ? 'end' : 'middle' }, fmtAgo(t1 - t)));
    }
    series.forEach((s) => {
      if (s.values.length === 0) return;
      const d = s.values.map((p, j) => (j ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1)).join(' ');
      root.append(svg('path', { class: 'line ' + s.cls, d, 'data-series': s.name }));
    });
    const legend = el('div', { class: 'legend', 'aria-hidden': 'true' },
      ...series.map((s) => el('span', {}, el('span', { class: 'swatch ' + s.cls }), s.name)));
    box.append(root, legend);
  }

  function fmtY(v, digits) {
    if (v >= 10000) return (v / 1000).toFixed(v >= 100000 ? 0 : 1) + 'k';
    return digits && v % 1 ? v.toFixed(digits) : String(Math.round(v));
  }

  // perSecond turns a history counter into a rate. The API's syncs_ok
  // and syncs_failed count the syncs since the sample before, so each
  // sample's rate is its count over the time since the previous one.
  function perSecond(history, key) {
    const out = [];
    for (let i = 1; i < history.length; i++) {
      const dt = (history[i].t_ms - history[i - 1].t_ms) / 1000;
      if (dt > 0) out.push([history[i].t_ms, Math.max(0, history[i][key] || 0) / dt]);
    }
    return out;
  }

  function drawCharts(s) {
    const h = Array.isArray(s.history) ? s.history : [];
    lineChart($('chart-backlog'), [
      { name: 'due', cls: 's0', values: h.map((p) => [p.t_ms, p.due || 0]) },
      { name: 'in flight', cls: 's1', values: h.map((p) => [p.t_ms, p.in_flight || 0]) },
    ], s.now_ms, 'chart-backlog-title', 0);
    lineChart($('chart-throughput'), [
      { name: 'ok', cls: 's3', values: perSecond(h, 'syncs_ok') },
      { name: 'failed', cls: 's2', values: perSecond(h, 'syncs_failed') },
    ], s.now_ms, 'chart-throughput-title', 1);
  }

  // ---- summary ----

  function setCount(id, text) { const e = $(id); if (e.textContent !== text) e.textContent = text; }

  // dataLossLine is status's "redis last lost this deployment's data"
  // line for a store.DataLoss.
  function dataLossLine(l) {
    // Numbers as status writes them too (1000, not 1,000): the line
    // reads the same in both.
    const items = (n) => `${n} item${n === 1 ? '' : 's'}`;
    const restored = typeof l.restored === 'number' ? l.restored : 0;
    const lost = typeof l.lost === 'number' && l.lost > 0
      ? `up to ${items(l.lost)} added by hand (in no source) were lost`
      : 'none added by hand was lost';
    const ms = l.at ? Date.parse(l.at) : NaN;
    const at = isFinite(ms) && ms > 0 ? 'at ' + new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z') : 'at an unknown time';
    return `Redis last lost this deployment's data ${at}: ${items(restored)} restored from the sources; ${lost}.`;
  }

  function drawSummary(s) {
    setCount('count-items', fmtNum(s.items));
    setCount('count-due', fmtNum(s.due));
    setCount('count-in-flight', fmtNum(s.in_flight));
    setCount('count-backing-off', fmtNum(s.backing_off));
    setCount('count-quarantined', fmtNum(s.quarantined));
    setCount('count-oldest-wait', s.oldest_due_ms ? fmtDur(s.oldest_due_ms) : 'none');
    setCount('count-daemons', fmtNum(s.daemons));
    setCount('count-workers', fmtNum(s.workers));
    $('count-quarantined').parentElement.classList.toggle('set', s.quarantined > 0);
    setCount('nav-quarantined-count', s.quarantined > 0 ? String(s.quarantined) : '');
    const t = s.target;
    setCount('target', t
      ? `breaker ${t.state.replace('_', ' ')}` +
        // since_ms is 0 for a breaker that never changed state: no time to show.
        (t.since_ms ? ` since ${fmtTime(t.since_ms)} (${fmtDur(s.now_ms - t.since_ms)})` : '') +
        (t.next_probe_ms ? ` · next probe ${fmtTime(t.next_probe_ms)}` : '') +
        (t.limit ? ` · permits in use ${fmtNum(t.permits_in_use)} of ${fmtNum(t.limit)}` : ` · permits in use ${fmtNum(t.permits_in_use)}`) +
        (t.last_error ? ` · last error: ${t.last_error}` : '')
      : 'No target configured.');
    // Out of memory, Redis refuses the daemons' registry writes, whose
    // entries expire: the daemon and worker counts may be low. Said as
    // status says it, a line per master, right under those counts.
    const oom = Array.isArray(s.redis_out_of_memory) ? s.redis_out_of_memory : [];
    $('out-of-memory').hidden = oom.length === 0;
    setCount('out-of-memory', oom.map((addr) => `Warning: redis ${addr} is out of memory (maxmemory reached, maxmemory-policy noeviction) and refuses writes: daemons cannot claim, release or register, so the daemon count may be low; free memory or raise maxmemory.`).join('\n'));
    $('count-daemons').parentElement.classList.toggle('set', oom.length > 0);
    $('count-workers').parentElement.classList.toggle('set', oom.length > 0);
    // The last time Redis lost the deployment's data (data_loss), said
    // as status says it, its time as status writes it (RFC 3339, UTC).
    const loss = s.data_loss && typeof s.data_loss === 'object' ? s.data_loss : null;
    $('data-loss').hidden = !loss;
    setCount('data-loss', loss ? dataLossLine(loss) : '');
    // Copies planted in another shard than their ids' are no items: the
    // counts leave them out, the quarantined list shows them. Said as
    // status and the batch report say it.
    const ws = s.wrong_shard_count > 0 ? s.wrong_shard_count : 0;
    $('wrong-shard').hidden = ws === 0;
    setCount('wrong-shard', ws ? `Wrong shard: ${s.wrong_shard_partial ? 'at least ' : ''}${fmtNum(ws)} ${ws === 1 ? 'copy' : 'copies'} planted in another shard than their id's, quarantined there; the real items are counted above; syncd items remove --shard N removes one.` : '');
    const damaged = Array.isArray(s.damaged) ? s.damaged : [];
    const held = s.held_off_shards > 0 && s.held_off_until_ms > s.now_ms;
    $('held-off').hidden = !held;
    setCount('held-off', held
      ? `Claims wait: ${fmtNum(s.held_off_shards)} shard${s.held_off_shards === 1 ? '' : 's'} held off for up to ${fmtDur(s.held_off_until_ms - s.now_ms)} more, until no lease from before can be trusted (Redis lost its data, or the deployment is new: it waits one ttl).`
      : '');
    $('damaged').hidden = damaged.length === 0;
    setCount('damaged', damaged.length ? 'Damaged shards, their items wait: ' + damaged.join('; ') : '');
    setWritable(!!s.writable);
    if (page.view === 'summary') drawCharts(s);
  }

  function setWritable(w) {
    if (w === page.writable) return;
    page.writable = w;
    ui.tokenBox.hidden = !w;
    document.body.classList.toggle('writable', w);
    $('item-actions').hidden = !w;
    lists.forEach((l) => l.render());
  }

  // keepFocus runs redraw, which replaces the rows of body, and puts the
  // keyboard focus back on the same control of the same row if it was
  // in body: a refresh every 2 s must not take a keyboard user's place.
  function keepFocus(body, redraw) {
    const f = document.activeElement;
    const row = f && body.contains(f) ? f.closest('tr[data-id]') : null;
    const what = f && f.matches('input') ? 'input' : 'a';
    const at = row ? [...row.querySelectorAll(what)].indexOf(f) : -1;
    redraw();
    if (!row) return;
    const again = body.querySelector(`tr[data-id="${CSS.escape(row.dataset.id)}"]`);
    const target = again && again.querySelectorAll(what)[at];
    if (target) target.focus();
  }

  // ---- item lists (the items view and the quarantined view) ----

  class ItemList {
    constructor(root, name, fixedState) {
      this.name = name;
      this.fixedState = fixedState;
      this.filter = { state: fixedState || 'all', prefix: '' };
      this.cursors = [''];
      this.offsets = [0]; // the number of items on the pages before each
      this.data = null;
      this.shown = ''; // what the table shows, to redraw only on a change
      this.selected = new Set();
      this.seq = 0;
      root.append($('list-template').content.cloneNode(true));
      const q = (role) => root.querySelector(`[data-role="${role}"]`);
      this.el = { body: q('body'), bulk: q('bulk'), count: q('selected-count'), all: q('select-all'), selHead: q('sel-head'),
        first: q('first'), next: q('next'), note: q('page-note'), wrap: q('wrap'), caption: q('caption') };
      for (const role of ['table', 'body', 'first', 'next', 'page-note', 'bulk', 'bulk-requeue', 'bulk-release', 'bulk-sync', 'select-all']) {
        q(role).setAttribute('data-testid', `${name}-${role}`);
        q(role).id = `${name}-${role}`;
      }
      this.el.wrap.setAttribute('aria-label', name === 'items' ? 'Items table' : 'Quarantined items table');
      this.el.caption.textContent = (name === 'items' ? 'Items' : 'Quarantined items') + ', longest waiting first';
      this.el.first.addEventListener('click', () => { this.cursors = ['']; this.offsets = [0]; this.reload(); });
      this.el.next.addEventListener('click', () => {
        if (!this.data || !this.data.next_cursor) return;
        this.offsets.push(this.offsets[this.offsets.length - 1] + ((this.data.items && this.data.items.length) || 0));
        this.cursors.push(this.data.next_cursor);
        this.reload();
      });
      this.el.all.addEventListener('change', () => {
        for (const it of (this.data && this.data.items) || []) {
          if (this.el.all.checked) this.selected.add(it.id); else this.selected.delete(it.id);
        }
        this.render();
      });
      this.el.bulk.addEventListener('click', async (ev) => {
        const b = ev.target.closest('button[data-action]');
        if (b && await act(b.dataset.action, [...this.selected])) { this.selected.clear(); this.render(); }
      });
    }

    setFilter(state, prefix) {
      this.filter = { state: this.fixedState || state, prefix };
      this.cursors = [''];
      this.offsets = [0];
      this.selected.clear();
      this.reload();
    }

    // reload is load for a button: a failure shows as the message.
    reload() {
      this.load().catch((e) => say('Loading items failed: ' + e.message, 'error'));
    }

    async load() {
      const p = new URLSearchParams({ state: this.filter.state, limit: String(PAGE_SIZE) });
      if (this.filter.prefix) p.set('prefix', this.filter.prefix);
      const cursor = this.cursors[this.cursors.length - 1];
      if (cursor) p.set('cursor', cursor);
      // A later load (Next, a new filter) wins over an earlier one still
      // on its way, such as the periodic refresh's.
      const seq = ++this.seq;
      const data = await call('GET', '/items?' + p.toString());
      if (seq !== this.seq) return;
      this.data = data;
      this.render();
    }

    render() {
      const d = this.data, w = page.writable;
      const shown = JSON.stringify([d, w, [...this.selected]]);
      if (shown === this.shown) return;
      this.shown = shown;
      this.el.selHead.hidden = !w;
      const rows = [];
      for (const it of (d && d.items) || []) {
        const box = w ? el('td', { class: 'sel' }, el('input', { type: 'checkbox', 'aria-label': 'Select ' + it.id, 'data-id': it.id,
          'data-testid': 'row-select', checked: this.selected.has(it.id) })) : null;
        rows.push(el('tr', { 'data-id': it.id, 'data-testid': `${this.name}-row` }, box,
          el('td', {}, itemLink(it.id)), el('td', {}, stateBadge(it.state)),
          el('td', { class: 'num' }, it.wait_ms > 0 ? fmtDur(it.wait_ms) : (it.due_ms > Date.now() ? 'in ' + fmtDur(it.due_ms - Date.now()) : '–')),
          el('td', {}, fmtTime(it.last_sync_ms)), el('td', { class: 'mono' }, it.owner || '–'),
          el('td', { class: 'num' }, fmtFence(it.fence)), el('td', { class: 'num' }, fmtNum(it.attempts)),
          el('td', { class: 'err', 'data-testid': 'last-error' }, it.last_error || '')));
      }
      if (d && rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: w ? 9 : 8, class: 'empty' }, 'No items match.')));
      keepFocus(this.el.body, () => this.el.body.replaceChildren(...rows));
      this.el.body.querySelectorAll('input[type=checkbox]').forEach((c) => c.addEventListener('change', () => {
        if (c.checked) this.selected.add(c.dataset.id); else this.selected.delete(c.dataset.id);
        this.renderBulk();
      }));
      this.el.first.disabled = this.cursors.length <= 1;
      this.el.next.disabled = !(d && d.next_cursor);
      const n = (d && d.items && d.items.length) || 0;
      const from = this.offsets[this.offsets.length - 1];
      let note = d ? (n ? `showing ${fmtNum(from + 1)}–${fmtNum(from + n)}` : '') : 'loading…';
      if (d && d.partial) note += (note ? '; ' : '') + 'more may match: the scan stopped before the page filled, press Next';
      this.el.note.textContent = note;
      this.renderBulk();
    }

    renderBulk() {
      const w = page.writable;
      this.el.bulk.hidden = !w;
      const n = this.selected.size;
      this.el.count.textContent = `${n} selected`;
      this.el.bulk.querySelectorAll('button').forEach((b) => { b.disabled = n === 0; });
      const shown = (this.data && this.data.items) || [];
      this.el.all.checked = shown.length > 0 && shown.every((it) => this.selected.has(it.id));
    }
  }

  const lists = [];
  const itemsList = new ItemList($('items-list'), 'items', '');
  const quarantinedList = new ItemList($('quarantined-list'), 'quarantined', 'quarantined');
  lists.push(itemsList, quarantinedList);

  $('items-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    itemsList.setFilter($('filter-state').value, $('filter-prefix').value.trim());
  });

  // ---- item detail ----

  async function loadItem() {
    const id = page.itemId;
    let it;
    try {
      it = await call('GET', '/items/' + encodeURIComponent(id));
    } catch (e) {
      if (e.status === 404) {
        $('item-record').replaceChildren(el('dt', {}, 'Item'), el('dd', { 'data-testid': 'item-missing' }, 'unknown: no such item'));
        $('item-errors-body').replaceChildren();
        return;
      }
      throw e;
    }
    if (id !== page.itemId) return;
    const now = Date.now();
    const due = it.due_ms ? fmtTime(it.due_ms) + (it.due_ms <= now ? ` (waiting ${fmtDur(now - it.due_ms)})` : ` (in ${fmtDur(it.due_ms - now)})`) : '–';
    const rows = [
      ['State', stateBadge(it.state), 'item-state'],
      ['Quarantined', it.quarantined ? 'yes' : 'no', 'item-quarantined'],
      ['Due', due, 'item-due'],
      ['Last sync', fmtTime(it.last_sync_ms), 'item-last-sync'],
      ['Owner', it.owner || '–', 'item-owner'],
      ['Lease left', it.lease_left_ms ? fmtDur(it.lease_left_ms) : '–', 'item-lease-left'],
      ['Fence', fmtFence(it.fence), 'item-fence'],
      ['Attempts', fmtNum(it.attempts), 'item-attempts'],
    ];
    // A copy in another shard than its id's, or a last error lost to a
    // damaged key: the API's note says which, and the fix.
    if (it.note) rows.push(['Note', it.note, 'item-note']);
    $('item-record').replaceChildren(...rows.flatMap(([k, v, tid]) => [el('dt', {}, k), el('dd', { 'data-testid': tid }, v)]));
    const errs = (it.errors || []).map((e) => el('tr', { 'data-testid': 'error-row' },
      el('td', { class: 'when' }, fmtTime(e.at_ms)), el('td', { class: 'num fence' }, fmtFence(e.fence)), el('td', { class: 'err', 'data-testid': 'error-text' }, e.error)));
    if (errs.length === 0) errs.push(el('tr', {}, el('td', { colspan: 3, class: 'empty' }, 'No errors kept for this item.')));
    $('item-errors-body').replaceChildren(...errs);
  }

  $('item-actions').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-action]');
    if (b && page.itemId) act(b.dataset.action, [page.itemId]);
  });

  // ---- owners ----

  async function loadOwners() {
    const o = await call('GET', '/owners');
    const rows = (o.daemons || []).map((d) => {
      const inflight = d.in_flight || [];
      const links = el('td', { class: 'inflight', 'data-testid': 'owner-in-flight' }, `${inflight.length} `);
      inflight.slice(0, 8).forEach((id, i) => { links.append(i ? ', ' : '', itemLink(id)); });
      if (inflight.length > 8) links.append(' …');
      return el('tr', { 'data-testid': 'owner-row', 'data-id': d.id },
        el('td', { class: 'mono' }, d.id), el('td', {}, d.version || '–'),
        el('td', {}, fmtTime(d.started_ms)), el('td', { class: 'num' }, fmtDur(d.heartbeat_age_ms)),
        el('td', { class: 'num' }, fmtNum(d.workers)), links, el('td', { 'data-testid': 'owner-state' }, d.problem ? d.problem : d.draining ? 'draining' : 'running'));
    });
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'empty' }, 'No daemon is running.')));
    keepFocus($('owners-body'), () => $('owners-body').replaceChildren(...rows));
  }

  // ---- views, refresh ----

  const views = ['summary', 'items', 'quarantined', 'owners', 'item'];

  function route() {
    // A link with a malformed escape (#item/%E0%A4%A) threw here and left
    // the page on "Loading…": such a fragment is taken as it is.
    const raw = location.hash.slice(1) || 'summary';
    let h = raw;
    try { h = decodeURIComponent(raw); } catch (e) { /* keep raw */ }
    let view = h, id = '';
    if (h.startsWith('item/')) { view = 'item'; id = h.slice(5); }
    if (!views.includes(view)) view = 'summary';
    if (view !== page.view || id !== page.itemId) say('');
    page.view = view;
    page.itemId = id;
    for (const v of views) $('view-' + v).hidden = v !== view;
    for (const v of ['summary', 'items', 'quarantined', 'owners']) {
      const a = $('nav-' + v);
      if (v === view || (view === 'item' && v === 'items')) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    if (view === 'item') {
      $('item-id').textContent = id;
      $('item-record').replaceChildren();
      $('item-errors-body').replaceChildren();
    }
    refreshNow();
  }

  function loadView() {
    switch (page.view) {
      case 'items': return itemsList.load();
      case 'quarantined': return quarantinedList.load();
      case 'owners': return loadOwners();
      case 'item': return loadItem();
      default: return Promise.resolve();
    }
  }

  function setLive(text) {
    if (page.live !== text) { page.live = text; ui.status.textContent = text; }
  }

  let summary = null;

  // refresh reads the summary and the current view. One runs at a time;
  // a call while one runs makes it run once more when it ends, so that a
  // new view or an action's effect shows at once.
  async function refresh() {
    if (page.busy) { page.again = true; return; }
    page.busy = true;
    page.again = false;
    try {
      const [s] = await Promise.all([call('GET', '/summary'), loadView()]);
      summary = s;
      drawSummary(s);
      ui.updated.textContent = 'updated ' + fmtTime(s.now_ms || Date.now());
      setLive(page.paused ? 'Paused' : 'Live: every 2 s');
    } catch (e) {
      setLive('Refresh failed: ' + e.message);
    } finally {
      page.busy = false;
    }
    if (page.again) await refresh();
  }

  function schedule() {
    clearTimeout(page.timer);
    if (!page.paused) page.timer = setTimeout(async () => { await refresh(); schedule(); }, POLL_MS);
  }

  function refreshNow() { refresh().then(schedule); }

  ui.pause.addEventListener('click', () => {
    page.paused = !page.paused;
    ui.pause.setAttribute('aria-pressed', String(page.paused));
    ui.pause.textContent = page.paused ? 'Resume' : 'Pause';
    setLive(page.paused ? 'Paused' : 'Live: every 2 s');
    if (page.paused) clearTimeout(page.timer); else refreshNow();
  });

  ui.token.value = sessionStorage.getItem(TOKEN_KEY) || '';
  ui.token.addEventListener('input', () => {
    if (ui.token.value) sessionStorage.setItem(TOKEN_KEY, ui.token.value); else sessionStorage.removeItem(TOKEN_KEY);
  });

  window.addEventListener('hashchange', route);
  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (summary && page.view === 'summary') drawCharts(summary); }, 150);
  });
  route();
})();
