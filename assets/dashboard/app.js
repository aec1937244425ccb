// Wharf's live dashboard. Plain JavaScript, no framework, no build step.
//
// Data comes from GET /admin/stream (Server-Sent Events), read with
// fetch() rather than EventSource so that an Authorization header can be
// sent. Every string from the server is written with textContent.
'use strict';

(() => {
  const SVG = 'http://www.w3.org/2000/svg';
  // The broker's routes are mounted one level above the dashboard
  // (/dashboard/ -> /, or /broker/dashboard/ -> /broker/).
  const ROOT = new URL('../', document.baseURI);
  const HISTORY = 300; // seconds of rates in the chart
  const SPARK = 60; // seconds of depth per sparkline
  const STALL_MS = 5000; // no event for this long: reconnect
  const TOKEN_KEY = 'wharf.token';

  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------
  // Credentials
  // ------------------------------------------------------------------

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (_) {
      return '';
    }
  }

  function headers() {
    const t = token();
    return t ? { Authorization: 'Bearer ' + t } : {};
  }

  function askForToken(message) {
    $('auth').hidden = false;
    $('auth-error').textContent = message || '';
    $('token').focus();
  }

  $('auth').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch (_) {
      // Storage disabled: the token lives only as long as the field.
    }
    $('auth').hidden = true;
    backoff = 0;
    connect();
  });

  // ------------------------------------------------------------------
  // Formatting
  // ------------------------------------------------------------------

  const fmtInt = (n) => (n == null ? '–' : Math.round(n).toLocaleString('en-US'));

  function fmtRate(r) {
    if (r == null) return '–';
    if (r < 10) return (Math.round(r * 10) / 10).toLocaleString('en-US');
    return fmtInt(r);
  }

  const plural = (n, word) => fmtInt(n) + ' ' + word + (n === 1 ? '' : 's');

  function fmtBytes(b) {
    if (b == null) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) {
      b /= 1024;
      i++;
    }
    return (i === 0 ? b : b.toFixed(b < 10 ? 1 : 0)) + ' ' + units[i];
  }

  function fmtDuration(s) {
    if (s == null) return '–';
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    if (d) return d + 'd ' + h + 'h';
    if (h) return h + 'h ' + m + 'm';
    if (m) return m + 'm ' + (s % 60) + 's';
    return s + 's';
  }

  function fmtSince(unixS, nowMs) {
    if (!unixS) return '–';
    return fmtDuration(Math.max(0, Math.floor(nowMs / 1000 - unixS))) + ' ago';
  }

  const protocolOf = (s) => (String(s.client_id || '').startsWith('mqtt:') ? 'MQTT' : 'native');

  // ------------------------------------------------------------------
  // Status line and notices
  // ------------------------------------------------------------------

  function status(state, text) {
    const el = $('status');
    el.dataset.state = state;
    el.textContent = text;
  }

  let toastTimer = 0;
  function toast(text, isError) {
    const el = $('toast');
    el.textContent = text;
    el.classList.toggle('error', !!isError);
    el.classList.add('shown');
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => el.classList.remove('shown'), 6000);
  }

  // ------------------------------------------------------------------
  // State kept between events
  // ------------------------------------------------------------------

  let last = null; // {t, published, delivered}
  const rates = []; // {t, published, delivered} per second
  const depths = new Map(); // queue name -> [depth, ...]

  function takeRates(snap) {
    const o = snap.overview;
    let r = null;
    if (last && snap.t > last.t) {
      const dt = (snap.t - last.t) / 1000;
      // A counter that went back (a restarted broker) counts as zero.
      r = {
        t: snap.t,
        published: Math.max(0, o.published - last.published) / dt,
        delivered: Math.max(0, o.delivered - last.delivered) / dt,
      };
      rates.push(r);
      while (rates.length > HISTORY) rates.shift();
    }
    last = { t: snap.t, published: o.published, delivered: o.delivered };
    return r;
  }

  // ------------------------------------------------------------------
  // Rendering
  // ------------------------------------------------------------------

  function set(id, text) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
  }

  function render(snap) {
    const o = snap.overview;
    const r = takeRates(snap);
    set('version', 'v' + o.version);
    set('connections', fmtInt(o.sessions.native + o.sessions.mqtt + (o.sessions.sockets || 0)));
    set('sessions-native', fmtInt(o.sessions.native));
    set('sessions-sockets', fmtInt(o.sessions.sockets || 0));
    set('sessions-mqtt', fmtInt(o.sessions.mqtt));
    const d = o.denials || {};
    set('denied-bad', fmtInt(d.bad_credentials || 0));
    set('denied-blocked', fmtInt((d.blocked || 0) + (d.busy || 0)));
    set('denied-late', fmtInt(d.no_credentials_in_time || 0));
    const c = o.cluster;
    $('cluster').hidden = !c;
    if (c) {
      set('cluster-node', c.node);
      set('cluster-link', c.connected ? 'connected' : 'NATS away');
      set('cluster-up', fmtInt(c.peers_up));
      set('cluster-lost', fmtInt(c.peers_lost));
      set('cluster-conflicts', c.conflicts ? ' · ' + fmtInt(c.conflicts) + ' conflicts' : '');
    }
    set('rate-published', r ? fmtRate(r.published) : '–');
    set('rate-delivered', r ? fmtRate(r.delivered) : '–');
    set('total-published', fmtInt(o.published));
    set('total-delivered', fmtInt(o.delivered));
    set('memory', fmtBytes(o.resident_bytes));
    set('uptime', fmtDuration(o.uptime_s));
    set('topics', plural(o.topics, 'topic'));
    set('queue-count', plural(o.queues, 'queue'));
    const j = snap.jobs;
    set('workers', j ? fmtInt(j.workers) : '–');
    set('workers-unit', j && j.workers === 1 ? 'worker' : 'workers');
    set('jobs-ready', j ? fmtInt(j.ready) : '–');
    set('jobs-running', j ? fmtInt(j.running) : '–');
    set('jobs-total', j ? fmtInt(j.jobs) : '–');
    drawRates(snap.t);
    renderQueues(snap.queues || []);
    renderSessions(snap.sessions || [], o.sessions.native + o.sessions.mqtt + (o.sessions.sockets || 0), snap.t);
  }

  function svg(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const k in attrs) el.setAttribute(k, attrs[k]);
    return el;
  }

  // A round number at or above `v`, for the chart's scale.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function drawRates(now) {
    const chart = $('rates-chart');
    const w = Math.max(300, chart.clientWidth || 600);
    const h = 180;
    const pad = { l: 52, r: 8, t: 10, b: 22 };
    chart.setAttribute('viewBox', `0 0 ${w} ${h}`);
    chart.replaceChildren();
    let max = 0;
    for (const p of rates) max = Math.max(max, p.published, p.delivered);
    max = niceMax(max);
    const x = (t) => pad.l + ((t - (now - HISTORY * 1000)) / (HISTORY * 1000)) * (w - pad.l - pad.r);
    const y = (v) => pad.t + (1 - v / max) * (h - pad.t - pad.b);
    for (const f of [0, 0.5, 1]) {
      const gy = y(max * f);
      chart.append(svg('line', { x1: pad.l, x2: w - pad.r, y1: gy, y2: gy, class: 'grid' }));
      const label = svg('text', { x: pad.l - 6, y: gy + 4, class: 'axis', 'text-anchor': 'end' });
      label.textContent = fmtRate(max * f);
      chart.append(label);
    }
    for (const [sec, anchor] of [[HISTORY, 'start'], [HISTORY / 2, 'middle'], [0, 'end']]) {
      const label = svg('text', { x: x(now - sec * 1000), y: h - 6, class: 'axis', 'text-anchor': anchor });
      label.textContent = sec ? `-${sec / 60} min` : 'now';
      chart.append(label);
    }
    for (const key of ['delivered', 'published']) {
      const pts = rates.filter((p) => p.t >= now - HISTORY * 1000);
      if (pts.length < 2) continue;
      const d = pts.map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(' ');
      chart.append(svg('polyline', { points: d, class: 'line ' + key }));
    }
  }

  function sparkline(values) {
    const w = 100;
    const h = 22;
    const el = svg('svg', { viewBox: `0 0 ${w} ${h}`, class: 'sparkline', 'aria-hidden': 'true' });
    el.append(svg('line', { x1: 0, x2: w, y1: h - 0.5, y2: h - 0.5, class: 'baseline' }));
    if (values.length < 2) return el;
    const max = Math.max(1, ...values);
    const step = w / (SPARK - 1);
    const off = (SPARK - values.length) * step;
    const pts = values.map((v, i) => `${(off + i * step).toFixed(1)},${(h - 1 - (v / max) * (h - 2)).toFixed(1)}`);
    const first = pts[0].split(',')[0];
    el.append(svg('polygon', { points: `${first},${h} ${pts.join(' ')} ${w},${h}`, class: 'area' }));
    el.append(svg('polyline', { points: pts.join(' '), class: 'line depth' }));
    return el;
  }

  // Keeps a table body's rows in the order of `items`, one row per key,
  // made once and updated in place (so a button under the pointer stays).
  function syncRows(tbody, items, keyOf, make, update) {
    const rows = new Map();
    for (const tr of tbody.rows) rows.set(tr.dataset.key, tr);
    let prev = null;
    for (const item of items) {
      const key = keyOf(item);
      let tr = rows.get(key);
      if (tr) rows.delete(key);
      else {
        tr = make(item);
        tr.dataset.key = key;
      }
      update(tr, item);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of rows.values()) tr.remove();
  }

  function cell(tr, cls, numeric) {
    const td = document.createElement('td');
    td.className = cls + (numeric ? ' num' : '');
    tr.append(td);
    return td;
  }

  function button(text, cls, onClick) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = cls;
    b.textContent = text;
    b.addEventListener('click', onClick);
    return b;
  }

  function setCell(tr, cls, text) {
    const td = tr.querySelector('.' + cls);
    if (td.textContent !== text) td.textContent = text;
  }

  function renderQueues(queues) {
    const seen = new Set();
    for (const q of queues) {
      seen.add(q.name);
      let d = depths.get(q.name);
      if (!d) depths.set(q.name, (d = []));
      d.push(q.depth);
      while (d.length > SPARK) d.shift();
    }
    for (const name of [...depths.keys()]) if (!seen.has(name)) depths.delete(name);

    const tbody = $('queues').tBodies[0];
    syncRows(
      tbody,
      queues,
      (q) => q.name,
      (q) => {
        const tr = document.createElement('tr');
        tr.dataset.queue = q.name;
        cell(tr, 'name');
        for (const c of ['depth', 'ready', 'in-flight', 'on-disk', 'consumers']) cell(tr, c, true);
        cell(tr, 'dlq');
        cell(tr, 'dlq-depth', true);
        cell(tr, 'spark');
        const actions = cell(tr, 'actions');
        actions.append(
          button('Purge', 'purge danger', () => purge(tr.dataset.queue, tr)),
          button('Redrive', 'redrive', () => redrive(tr.dataset.dlq, tr.dataset.queue)),
        );
        return tr;
      },
      (tr, q) => {
        setCell(tr, 'name', q.name);
        setCell(tr, 'depth', fmtInt(q.depth));
        setCell(tr, 'ready', fmtInt(q.ready));
        setCell(tr, 'in-flight', fmtInt(q.in_flight));
        setCell(tr, 'on-disk', fmtInt(q.on_disk));
        setCell(tr, 'consumers', fmtInt(q.consumers));
        setCell(tr, 'dlq', q.dead_letter || '–');
        setCell(tr, 'dlq-depth', q.dead_letter == null ? '–' : fmtInt(q.dead_letter_depth || 0));
        tr.dataset.depth = String(q.depth);
        if (q.dead_letter) tr.dataset.dlq = q.dead_letter;
        else delete tr.dataset.dlq;
        tr.querySelector('.spark').replaceChildren(sparkline(depths.get(q.name) || []));
        tr.querySelector('.purge').disabled = q.depth === 0;
        const re = tr.querySelector('.redrive');
        re.hidden = !q.dead_letter;
        re.disabled = !q.dead_letter_depth;
        re.title = q.dead_letter ? `Move the messages of ${q.dead_letter} back to ${q.name}` : '';
      },
    );
    $('queues-empty').hidden = queues.length > 0;
  }

  function renderSessions(sessions, total, now) {
    const tbody = $('sessions').tBodies[0];
    syncRows(
      tbody,
      sessions,
      (s) => s.id,
      (s) => {
        const tr = document.createElement('tr');
        tr.dataset.session = s.id;
        const id = cell(tr, 'id');
        id.title = s.id;
        for (const c of ['client', 'protocol', 'principal', 'since']) cell(tr, c);
        for (const c of ['subs', 'queued', 'dropped', 'pending']) cell(tr, c, true);
        cell(tr, 'actions').append(button('Close', 'close danger', () => closeSession(tr.dataset.session, tr)));
        return tr;
      },
      (tr, s) => {
        setCell(tr, 'id', String(s.id).slice(0, 8));
        setCell(tr, 'client', s.client_id || '');
        setCell(tr, 'protocol', protocolOf(s));
        setCell(tr, 'principal', s.principal || '–');
        setCell(tr, 'since', fmtSince(s.since_unix_s, now));
        const out = s.outbound || {};
        setCell(tr, 'subs', fmtInt((s.subscriptions || 0) + (s.consumers || 0)));
        setCell(tr, 'queued', fmtInt(out.queued));
        setCell(tr, 'dropped', fmtInt(out.dropped));
        setCell(tr, 'pending', fmtBytes(out.pending_bytes));
        tr.classList.toggle('warn', (out.dropped || 0) > 0);
      },
    );
    $('sessions-empty').hidden = sessions.length > 0;
    set('sessions-note', total > sessions.length ? `(the oldest ${sessions.length} of ${total})` : '');
  }

  // ------------------------------------------------------------------
  // Actions
  // ------------------------------------------------------------------

  // A queue name as a path: each segment encoded, the slashes kept
  // (the routes take names with slashes).
  const queuePath = (name) => name.split('/').map(encodeURIComponent).join('/');

  async function call(method, path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 15000);
    try {
      const res = await fetch(new URL(path, ROOT), { method, headers: headers(), signal: ctl.signal });
      const text = await res.text();
      let body = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch (_) {
        body = null;
      }
      if (!res.ok) {
        const msg = body && body.error ? body.error.message : res.status + ' ' + res.statusText;
        throw new Error(msg);
      }
      return body;
    } finally {
      clearTimeout(timer);
    }
  }

  async function act(tr, what, run) {
    const buttons = tr ? tr.querySelectorAll('button') : [];
    buttons.forEach((b) => b.classList.add('busy'));
    try {
      toast(await run());
    } catch (e) {
      toast(`${what} failed: ${e.message}`, true);
    } finally {
      buttons.forEach((b) => b.classList.remove('busy'));
    }
  }

  function purge(name, tr) {
    const depth = tr.dataset.depth || '?';
    if (!confirm(`Purge queue "${name}"? Its ${depth} waiting message(s) will be deleted.`)) return;
    act(tr, 'Purge', async () => {
      const r = await call('DELETE', `queues/${queuePath(name)}/messages`);
      return `Purged ${fmtInt(r && r.purged)} message(s) from ${name}.`;
    });
  }

  function redrive(dlq, target) {
    if (!dlq) return;
    if (!confirm(`Move every message of "${dlq}" back to "${target}"?`)) return;
    act(null, 'Redrive', async () => {
      const r = await call('POST', `queues/${queuePath(dlq)}/redrive`);
      return `Moved ${fmtInt(r && r.moved)} message(s) from ${dlq}.`;
    });
  }

  function closeSession(id, tr) {
    const client = tr.querySelector('.client').textContent;
    if (!confirm(`Close session ${id} (${client})? Queued frames are delivered first.`)) return;
    act(tr, 'Close', async () => {
      await call('POST', `admin/sessions/${encodeURIComponent(id)}/close?drain=true`);
      return `Closed session ${id.slice(0, 8)}.`;
    });
  }

  // ------------------------------------------------------------------
  // The stream
  // ------------------------------------------------------------------

  let backoff = 0; // the last reconnect delay, ms
  let current = null; // the AbortController of the open stream
  let retryTimer = 0;

  function retry(reason) {
    const delay = backoff ? Math.min(30000, backoff * 2) : 1000;
    backoff = delay;
    status('disconnected', `disconnected (${reason}); retrying in ${Math.round(delay / 1000)} s`);
    clearTimeout(retryTimer);
    retryTimer = setTimeout(connect, delay);
  }

  async function connect() {
    clearTimeout(retryTimer);
    if (current) current.abort();
    const ctl = new AbortController();
    current = ctl;
    let stall = setTimeout(() => ctl.abort(), STALL_MS + 5000);
    const alive = () => {
      clearTimeout(stall);
      stall = setTimeout(() => ctl.abort(), STALL_MS);
    };
    status('connecting', 'connecting…');
    let reason = 'the stream ended';
    try {
      const res = await fetch(new URL('admin/stream', ROOT), {
        headers: { ...headers(), Accept: 'text/event-stream' },
        cache: 'no-store',
        signal: ctl.signal,
      });
      if (res.status === 401 || res.status === 403) {
        let msg = '';
        try {
          const body = await res.json();
          msg = body && body.error ? body.error.message : '';
        } catch (_) {
          msg = '';
        }
        clearTimeout(stall);
        status('disconnected', res.status === 401 ? 'needs credentials' : 'this token lacks the admin right');
        askForToken(msg);
        return;
      }
      if (!res.ok || !res.body) {
        let msg = res.status + ' ' + res.statusText;
        try {
          const body = await res.json();
          if (body && body.error) msg = body.error.message;
        } catch (_) {
          // Not JSON: keep the status line.
        }
        throw new Error(msg);
      }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        alive();
        buf += decoder.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const raw = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = raw
            .split('\n')
            .filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).replace(/^ /, ''))
            .join('\n');
          if (!data) continue;
          const snap = JSON.parse(data);
          render(snap);
          backoff = 0;
          status('connected', 'connected · live');
        }
        if (buf.length > 16 << 20) throw new Error('an event over 16 MiB');
      }
    } catch (e) {
      reason = ctl.signal.aborted ? 'no data for ' + STALL_MS / 1000 + ' s' : e.message;
    } finally {
      clearTimeout(stall);
    }
    if (current === ctl) retry(reason);
  }

  window.addEventListener('resize', () => last && drawRates(last.t));
  connect();
})();
