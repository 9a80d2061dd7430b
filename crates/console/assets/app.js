// OED console: hash-routed single page; talks to api/* on the same origin.
'use strict';
(() => {
const MiB = 1024 * 1024;
const PART = 8 * MiB; // multipart part size
const SINGLE_MAX = 16 * MiB; // larger files go multipart
const DASH = '—';
const SVGNS = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);
const TXT = {type: 'text', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'off'}; // plain text input

let session = null; // {id, admin, csrf}; the session cookie itself is HttpOnly
let poll = null; // the one running poller, if any
let viewToken = 0; // bumped on every view change; stale async work compares it
const live = (tok) => tok === viewToken;

// ---- DOM helpers (no innerHTML anywhere)
function add(el, kids) {
  for (const k of kids.flat()) if (k != null && k !== false) el.append(k instanceof Node ? k : String(k));
  return el;
}
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'text') el.textContent = v;
    else if (k === 'class') el.className = v;
    else if (k === 'data') Object.assign(el.dataset, v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  return add(el, kids);
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, v);
  return add(el, kids);
}
function setText(el, t) { if (el.textContent !== t) el.textContent = t; }
const wrapTable = (table, label) => h('div', {class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': label}, table);
const heading = (level, text, id) => h('h' + level, {id, tabindex: level === 1 ? '-1' : null, text});
const kv = (pairs, cls) => h('dl', {class: cls || 'kv'}, pairs.map(([k, v]) => h('div', null, h('dt', {text: k}), h('dd', null, v))));

// ---- formatting
const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
function fmtBytes(n) {
  if (!isNum(n)) return DASH;
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0, v = n;
  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(1)} ${u[i]}`;
}
const fmtExact = (n) => isNum(n) ? (n >= 1024 ? `${fmtBytes(n)} (${n.toLocaleString('en')} B)` : fmtBytes(n)) : DASH;
const fmtRate = (n) => isNum(n) ? fmtBytes(n) + '/s' : DASH;
const fmtW = (w) => isNum(w) ? `${w.toFixed(1)} W` : DASH;
const fmtPct = (f) => isNum(f) ? `${(f * 100).toFixed(f < 0.1 ? 1 : 0)} %` : DASH;
const fmtPerS = (v) => isNum(v) ? `${v.toFixed(1)}/s` : DASH;
const fmtCount = (v) => isNum(v) ? v.toLocaleString('en') : DASH;
const withMethod = (text, method) => `${text} (${method || 'method unknown'})`;
function fmtJ(j) {
  if (!isNum(j)) return DASH;
  if (Math.abs(j) < 1e3) return `${j.toFixed(1)} J`;
  if (Math.abs(j) < 1e6) return `${(j / 1e3).toFixed(1)} kJ`;
  return `${(j / 1e6).toFixed(2)} MJ`;
}
function fmtDur(sec) {
  if (!isNum(sec)) return DASH;
  if (sec < 1) return 'under 1 s';
  if (sec < 60) return `${Math.round(sec)} s`;
  if (sec < 3600) return `${Math.round(sec / 60)} min`;
  if (sec < 86400) return `${Math.floor(sec / 3600)} h ${Math.round((sec % 3600) / 60)} min`;
  return `${Math.floor(sec / 86400)} d ${Math.round((sec % 86400) / 3600)} h`;
}
function fmtAgo(ms, now) {
  if (!isNum(ms)) return 'never';
  const d = ((now || Date.now()) - ms) / 1000;
  return d < 5 ? 'just now' : `${fmtDur(d)} ago`;
}
const eta = (sec) => isNum(sec) ? `, about ${fmtDur(sec)} left` : '';
const pctOf = (a, b) => isNum(a) && b > 0 ? `${Math.round((a / b) * 100)}%` : DASH;
function fmtDate(v) {
  const d = new Date(v);
  return isNaN(d) ? String(v || DASH) : d.toLocaleString();
}
const fmtClock = (ms) => new Date(ms).toLocaleTimeString();

// ---- errors and requests
class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  toString() { return `${this.code}: ${this.message}`; }
}
function parseXml(text) {
  if (!text || !text.trim()) return null;
  const d = new DOMParser().parseFromString(text, 'application/xml');
  return d.getElementsByTagName('parsererror').length ? null : d;
}
const byTag = (el, name) => Array.from(el.getElementsByTagNameNS('*', name));
const first = (el, name) => { const n = byTag(el, name)[0]; return n ? n.textContent : ''; };
const kids = (el, name) => Array.from(el.children).filter((c) => c.localName === name);
const childText = (el, name) => { const c = kids(el, name)[0]; return c ? c.textContent : null; };
const xmlEsc = (t) => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function parseError(status, type, text, statusText) {
  let code = `HTTP ${status}`, msg = statusText || 'request failed';
  const body = (text || '').trim();
  if (/json/.test(type || '')) {
    try { const j = JSON.parse(body); code = j.code || code; msg = j.message || msg; } catch { /* keep defaults */ }
  } else if (body.startsWith('<')) {
    const d = parseXml(body);
    if (d) { code = first(d.documentElement, 'Code') || code; msg = first(d.documentElement, 'Message') || msg; }
  } else if (body) msg = body.slice(0, 300);
  return new ApiError(status, code, msg);
}

// fetch with the session cookie and the CSRF header on unsafe methods.
async function call(method, path, opts = {}) {
  const headers = Object.assign({}, opts.headers);
  if (method !== 'GET' && method !== 'HEAD' && session) headers['X-OED-CSRF'] = session.csrf;
  let res;
  try {
    res = await fetch(path, {method, headers, body: opts.body, credentials: 'same-origin', cache: 'no-store'});
  } catch {
    throw new ApiError(0, 'NetworkError', 'the console did not answer');
  }
  if (res.status === 401 && !opts.login) {
    expired();
    throw new ApiError(401, 'Unauthorized', 'the session ended; sign in again');
  }
  if (!res.ok) {
    const text = method === 'HEAD' ? '' : await res.text().catch(() => '');
    throw parseError(res.status, res.headers.get('content-type'), text, res.statusText);
  }
  return res;
}
const getJson = async (path) => (await call('GET', path)).json();

// S3 answer as XML; a 200 carrying <Error> is an error too.
async function s3xml(method, path, opts) {
  const res = await call(method, path, opts);
  const text = await res.text();
  const doc = parseXml(text);
  if (!doc) {
    if (text.trim()) throw new ApiError(res.status, 'BadAnswer', 'the answer is not XML');
    return null;
  }
  if (doc.documentElement.localName === 'Error') throw parseError(res.status, 'xml', text);
  return doc;
}

// An object's key goes in the query (oed-key), never in the path: a browser would
// resolve '.' and '..' segments of a key in a path and send the request elsewhere.
const s3url = (b, k, q) => 'api/s3/' + encodeURIComponent(b) +
  (k != null ? '?oed-key=' + encodeURIComponent(k) + (q ? '&' + q : '') : (q ? '?' + q : ''));
// The part after the first: the query joiner of an object's URL.
const more = (url) => (url.includes('?') ? '&' : '?');
const qs = (o) => Object.entries(o).filter(([, v]) => v != null && v !== '')
  .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
const bucketHash = (b, prefix) => `#/buckets/${encodeURIComponent(b)}` + (prefix ? `?prefix=${encodeURIComponent(prefix)}` : '');
const opHash = (b, k) => `#/op?${qs({bucket: b, key: k})}`;

// PUT through XMLHttpRequest for upload progress; resolves with the finished request.
function xhrPut(url, body, headers, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', url);
    x.withCredentials = true;
    if (session) x.setRequestHeader('X-OED-CSRF', session.csrf);
    for (const [k, v] of Object.entries(headers || {})) x.setRequestHeader(k, v);
    x.upload.addEventListener('progress', (e) => onProgress(e.loaded));
    x.addEventListener('load', () => {
      if (x.status === 401) { expired(); reject(new ApiError(401, 'Unauthorized', 'the session ended; sign in again')); }
      else if (x.status >= 200 && x.status < 300) resolve(x);
      else reject(parseError(x.status, x.getResponseHeader('content-type'), x.responseText, x.statusText));
    });
    x.addEventListener('error', () => reject(new ApiError(0, 'NetworkError', 'the upload was cut off')));
    x.addEventListener('abort', () => reject(new ApiError(0, 'Aborted', 'the upload was aborted')));
    x.send(body);
  });
}

// Single PUT up to 16 MiB, else multipart with 8 MiB parts, two in flight.
async function upload(bucket, key, file, onProgress) {
  const type = file.type || 'application/octet-stream';
  const url = s3url(bucket, key);
  if (file.size <= SINGLE_MAX) { await xhrPut(url, file, {'Content-Type': type}, onProgress); return; }
  const init = await s3xml('POST', url + more(url) + 'uploads', {headers: {'Content-Type': type}});
  const id = init && first(init.documentElement, 'UploadId');
  if (!id) throw new ApiError(0, 'BadAnswer', 'no UploadId in the answer');
  const uq = `uploadId=${encodeURIComponent(id)}`;
  // At most 10,000 parts, as S3 allows: parts grow past 8 MiB for files over 78 GiB.
  const part = Math.max(PART, Math.ceil(file.size / 10000));
  const n = Math.ceil(file.size / part), sent = new Array(n).fill(0), etags = new Array(n);
  const report = () => onProgress(sent.reduce((a, b) => a + b, 0));
  let next = 0, err = null;
  const worker = async () => {
    while (!err && next < n) {
      const i = next++;
      const piece = file.slice(i * part, Math.min(file.size, (i + 1) * part));
      try {
        const x = await xhrPut(`${url}${more(url)}partNumber=${i + 1}&${uq}`, piece, {}, (b) => { sent[i] = b; report(); });
        const tag = x.getResponseHeader('ETag');
        if (!tag) throw new ApiError(0, 'BadAnswer', `part ${i + 1} came back without an ETag`);
        etags[i] = tag;
        sent[i] = piece.size;
        report();
      } catch (e) { err = err || e; }
    }
  };
  await Promise.all([worker(), worker()]);
  try {
    if (err) throw err;
    const body = '<CompleteMultipartUpload>' + etags.map((t, i) =>
      `<Part><PartNumber>${i + 1}</PartNumber><ETag>${xmlEsc(t)}</ETag></Part>`).join('') + '</CompleteMultipartUpload>';
    await s3xml('POST', `${url}${more(url)}${uq}`, {headers: {'Content-Type': 'application/xml'}, body});
  } catch (e) {
    if (e.status !== 401) call('DELETE', `${url}${more(url)}${uq}`).catch(() => {});
    throw e;
  }
}

// ---- polling: one poller at a time, never overlapping, only while the tab is visible
function startPoll(fn, ms) {
  stopPoll();
  poll = {fn, ms, timer: 0, busy: false};
  tick(poll);
}
function stopPoll() {
  if (poll) clearTimeout(poll.timer);
  poll = null;
}
async function tick(p) {
  p.timer = 0;
  if (poll !== p || p.busy || document.visibilityState !== 'visible') return;
  p.busy = true;
  let more = true;
  try { more = await p.fn(); } catch (e) { console.error(e); }
  p.busy = false;
  if (more === false && poll === p) poll = null;
  if (poll === p && document.visibilityState === 'visible') p.timer = setTimeout(() => tick(p), p.ms);
}
document.addEventListener('visibilitychange', () => {
  if (!poll) return;
  if (document.visibilityState === 'visible') { if (!poll.timer && !poll.busy) tick(poll); }
  else { clearTimeout(poll.timer); poll.timer = 0; }
});

// ---- session and header
function say(msg) { $('messages').textContent = msg; }
function setSession(j) {
  session = j ? {id: j.access_key_id, admin: !!j.admin, csrf: j.csrf} : null;
  $('nav').hidden = !session;
  $('user').hidden = !session;
  const ov = $('nav-overview');
  ov.hidden = ov.parentElement.hidden = !(session && session.admin);
  $('whoami').textContent = session ? session.id : '';
}
const home = () => (session && session.admin ? '#/overview' : '#/buckets');
function expired() {
  if (!session) return;
  showLogin('Your session ended. Sign in again.');
}

function showLogin(msg) {
  stopPoll();
  viewToken++;
  setSession(null);
  delete document.body.dataset.ready;
  const access = h('input', {...TXT, id: 'access-key', autocomplete: 'username', required: true});
  const secret = h('input', {id: 'secret-key', type: 'password', autocomplete: 'current-password', required: true});
  const btn = h('button', {id: 'login-button', type: 'submit', class: 'primary', text: 'Sign in'});
  const err = h('p', {id: 'login-error', class: 'error', role: 'alert', text: msg || ''});
  const form = h('form', {id: 'login-form', class: 'login', onsubmit: async (e) => {
    e.preventDefault();
    btn.disabled = true;
    err.textContent = '';
    try {
      const res = await call('POST', 'api/login', {login: true, headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({access_key_id: access.value.trim(), secret_access_key: secret.value})});
      secret.value = '';
      setSession(await res.json());
      say('');
      const target = home();
      if (location.hash === target) route(true); else location.hash = target;
    } catch (ex) {
      secret.value = '';
      err.textContent = String(ex);
      btn.disabled = false;
      secret.focus();
    }
  }},
  h('div', {class: 'field'}, h('label', {for: 'access-key', text: 'Access key ID'}), access),
  h('div', {class: 'field'}, h('label', {for: 'secret-key', text: 'Secret access key'}), secret),
  btn, err);
  $('main').replaceChildren(heading(1, 'Sign in'),
    h('p', {class: 'muted', text: 'Sign in with an access key of this OED cluster.'}), form);
  access.focus();
}

// ---- routing
function parseHash() {
  const raw = location.hash.replace(/^#/, '');
  const qi = raw.indexOf('?');
  const path = qi < 0 ? raw : raw.slice(0, qi);
  const dec = (p) => { try { return decodeURIComponent(p); } catch { return p; } };
  return {parts: path.split('/').filter(Boolean).map(dec), q: new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1))};
}
function route(focus) {
  stopPoll();
  const tok = ++viewToken;
  delete document.body.dataset.ready;
  if (!session) return showLogin();
  say('');
  const {parts, q} = parseHash();
  for (const [id, name] of [['nav-overview', 'overview'], ['nav-buckets', 'buckets'], ['nav-op', 'op']]) {
    const cur = parts[0] === name || (name === 'overview' && parts[0] === 'drives');
    if (cur) $(id).setAttribute('aria-current', 'page'); else $(id).removeAttribute('aria-current');
  }
  $('main').replaceChildren();
  const p0 = parts[0];
  if (p0 === 'overview') viewOverview(tok);
  else if (p0 === 'drives' && parts[1]) viewDrive(tok, parts[1]);
  else if (p0 === 'buckets') parts[1] ? viewBucket(tok, parts[1], q.get('prefix') || '') : viewBuckets(tok);
  else if (p0 === 'op') viewOp(tok, q);
  else { history.replaceState(null, '', home()); return route(focus); }
  if (focus) { const h1 = $('main').querySelector('h1'); if (h1) h1.focus(); }
}

function showErr(el, e) { el.hidden = false; setText(el, String(e)); }

// ---- overview
function moveText(kind, m) {
  return `${kind}: ${m.state}, ${fmtCount(m.left_shards)} left, ${fmtCount(m.moved_shards)} moved${eta(m.eta_seconds)}`;
}
// A drain or rebalance worth showing: one under way, or stopped with shards left.
const moving = (m) => m && (m.state === 'draining' || m.state === 'moving' || (m.state === 'stopped' && m.left_shards > 0));
function activity(x, now) {
  const out = [];
  if (!x.up) out.push(x.error ? `not answering: ${x.error}` : 'not answering');
  else if (x.error) out.push(`error: ${x.error}`);
  if (x.scrub) out.push(x.scrub.running ? 'scrub running' : `scrubbed ${fmtAgo(x.scrub.last_complete_ms, now)}`);
  if (moving(x.drain)) out.push(moveText('drain', x.drain));
  if (moving(x.rebalance)) out.push(moveText('rebalance', x.rebalance));
  if (x.lifecycle && x.lifecycle.running) out.push('lifecycle running');
  return out.join('; ') || 'idle';
}
function powerText(p) { return p ? withMethod(fmtW(p.watts), p.method) : DASH; }
function driveCells(x, now) {
  const c = x.capacity, hq = x.heal;
  return [
    x.domain || DASH,
    x.map_state || DASH,
    c ? `${fmtBytes(c.used_bytes)} (${pctOf(c.used_bytes, c.total_bytes)})` : DASH,
    c ? fmtBytes(c.free_bytes) : DASH,
    powerText(x.power),
    x.power ? withMethod(fmtJ(x.power.joules), x.power.method) : DASH,
    isNum(x.temperature_c) ? `${x.temperature_c.toFixed(1)} °C` : DASH,
    fmtPct(x.cpu_busy),
    hq ? `${fmtCount(hq.queued)} (${fmtBytes(hq.queued_bytes)})` : DASH,
    activity(x, now),
  ];
}
const COLS = ['Drive', 'State', 'Domain', 'Map', 'Used', 'Free', 'Power', 'Energy', 'Temp.', 'CPU', 'Heal queue', 'Activity'];

function viewOverview(tok) {
  const dd = {};
  const item = (key, label, ...content) => h('div', null, h('dt', {text: label}), dd[key] = h('dd', null, ...content));
  const capText = h('span'), meter = h('meter', {min: '0', max: '1', value: '0', 'aria-label': 'Capacity used'});
  const heal = h('span', {id: 'heal', data: {queued: '0'}, text: DASH});
  const moves = h('ul', {class: 'plain'});
  const info = h('p', {class: 'muted'});
  const err = h('p', {id: 'overview-error', class: 'error', role: 'alert', hidden: true});
  const tbody = h('tbody');
  const rows = new Map();
  let ready = false;
  const body = h('div', {hidden: true},
    h('dl', {class: 'summary'},
      item('drives', 'Drives up'), item('cap', 'Capacity', capText, meter), item('power', 'Power now'),
      item('energy', 'Energy'), item('io', 'Throughput now'), item('heal', 'Heal backlog', heal),
      item('moves', 'Drain and rebalance', moves), item('scrub', 'Last scrub')),
    heading(2, 'Drives', 'drives-h'),
    wrapTable(h('table', {id: 'drives', 'aria-labelledby': 'drives-h'},
      h('thead', null, h('tr', null, COLS.map((c) => h('th', {scope: 'col', text: c})))), tbody), 'Drives table'));
  $('main').append(heading(1, 'Overview'), info, err, body);

  function row(x) {
    let r = rows.get(x.id);
    if (!r) {
      const link = h('a', {href: `#/drives/${encodeURIComponent(x.id)}`, text: x.id});
      const state = h('span', {class: 'state'});
      const cells = COLS.slice(2).map((_, i) => h('td', {class: i === COLS.length - 3 ? 'wrap' : null}));
      r = {tr: h('tr', {data: {drive: x.id}}, h('th', {scope: 'row'}, link), h('td', null, state), cells), state, cells};
      rows.set(x.id, r);
    }
    return r;
  }
  function render(d) {
    const t = d.totals || {}, drives = d.drives || [], now = d.now_ms || Date.now();
    setText(info, `Cluster ${d.cluster_id || DASH}, map epoch ${d.epoch ?? DASH}, erasure coding ${d.k ?? '?'}+${d.m ?? '?'}. ` +
      `Updated ${fmtClock(now)}; refreshed every 2 s while this tab is visible.`);
    setText(dd.drives, `${t.drives_up ?? DASH} of ${t.drives ?? drives.length}`);
    setText(capText, `${fmtBytes(t.used_bytes)} used of ${fmtBytes(t.total_bytes)} (${pctOf(t.used_bytes, t.total_bytes)}), ${fmtBytes(t.free_bytes)} free`);
    meter.value = t.total_bytes > 0 ? t.used_bytes / t.total_bytes : 0;
    setText(dd.power, withMethod(fmtW(t.watts), t.energy_method));
    setText(dd.energy, withMethod(`${fmtJ(t.joules)} since start, ${fmtJ(t.joules_today)} today`, t.energy_method));
    setText(dd.io, `read ${fmtRate(t.read_bytes_per_second)}, write ${fmtRate(t.written_bytes_per_second)}`);
    const q = isNum(t.heal_queued) ? t.heal_queued : 0;
    heal.dataset.queued = String(q);
    setText(heal, q > 0 ? `${q} shard${q === 1 ? '' : 's'} to heal${isNum(t.heal_eta_seconds) ? `, about ${fmtDur(t.heal_eta_seconds)} left` : ''}` : 'nothing to heal');
    const mv = [];
    for (const x of drives) {
      if (moving(x.drain)) mv.push(`${x.id} ${moveText('drain', x.drain)}`);
      if (moving(x.rebalance)) mv.push(`${x.id} ${moveText('rebalance', x.rebalance)}`);
    }
    moves.replaceChildren(...(mv.length ? mv : ['none in progress']).map((m) => h('li', {text: m})));
    const scrubs = drives.map((x) => x.scrub).filter(Boolean);
    const last = Math.max(...scrubs.map((x) => x.last_complete_ms).filter(isNum));
    const running = drives.filter((x) => x.scrub && x.scrub.running).map((x) => x.id);
    setText(dd.scrub, (isFinite(last) ? fmtAgo(last, now) : 'never') + (running.length ? `; running on ${running.join(', ')}` : ''));

    const seen = new Set();
    drives.forEach((x, i) => {
      const r = row(x), up = !!x.up;
      seen.add(x.id);
      r.tr.dataset.state = up ? 'up' : 'down';
      r.state.className = `state ${up ? 'up' : 'down'}`;
      setText(r.state, up ? 'up' : 'down');
      driveCells(x, now).forEach((v, j) => setText(r.cells[j], v));
      if (tbody.children[i] !== r.tr) tbody.insertBefore(r.tr, tbody.children[i] || null);
    });
    for (const [id, r] of rows) if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
  }
  startPoll(async () => {
    let d;
    try { d = await getJson('api/overview'); } catch (e) {
      if (!live(tok) || e.status === 401) return false;
      showErr(err, e);
      return e.status !== 403;
    }
    if (!live(tok)) return false;
    err.hidden = true;
    body.hidden = false;
    render(d);
    if (!ready) {
      ready = true;
      document.body.dataset.ready = 'overview';
      if (!window.oedTimings) window.oedTimings = {overviewReadyMs: performance.now()};
    }
  }, 2000);
}

// ---- one drive
const FMT = {pct: fmtPct, rate: fmtRate, w: fmtW, rps: fmtPerS};
const PLOTS = [
  {id: 'cpu', title: 'CPU busy', unit: 'pct', max: 1, lines: [['cpu_busy', 'busy']]},
  {id: 'disk', title: 'Disk, bytes per second', unit: 'rate', lines: [['disk_read_bytes_per_second', 'read'], ['disk_written_bytes_per_second', 'written']]},
  {id: 'net', title: 'Network, bytes per second', unit: 'rate', lines: [['net_rx_bytes_per_second', 'received'], ['net_tx_bytes_per_second', 'sent']]},
  {id: 'power', title: 'Power', unit: 'w', lines: [['watts', 'power']]},
  {id: 'requests', title: 'Requests per second', unit: 'rps', lines: [['requests_per_second', 'requests']]},
];

function plot(def, hist, title, open) {
  const pts = hist.points || [];
  const now = hist.now_ms || Date.now(), span = 3600e3, t0 = now - span;
  const gap = (hist.period_seconds || 10) * 2500;
  const fmt = FMT[def.unit];
  let max = def.max || 0;
  const stats = def.lines.map(([k, name]) => {
    const v = pts.map((p) => p[k]).filter(isNum);
    const mx = v.length ? Math.max(...v) : null;
    if (!def.max && mx > max) max = mx;
    return {name, latest: v.length ? v[v.length - 1] : null, min: v.length ? Math.min(...v) : null, max: mx};
  });
  if (!(max > 0)) max = 1;
  const W = 300, H = 128, TOP = 14, BOT = 112;
  const X = (t) => (((t - t0) / span) * W).toFixed(1);
  const Y = (v) => (BOT - (v / max) * (BOT - TOP)).toFixed(1);
  const label = `${title}, last hour: ` + (pts.length ? stats.map((st) =>
    `${st.name} latest ${fmt(st.latest)}, min ${fmt(st.min)}, max ${fmt(st.max)}`).join('; ') : 'no data');
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label},
    s('line', {x1: 0, x2: W, y1: TOP, y2: TOP, class: 'grid'}),
    s('line', {x1: 0, x2: W, y1: BOT, y2: BOT, class: 'axis'}),
    s('text', {x: 2, y: 10, class: 'tick'}, fmt(max)),
    s('text', {x: 0, y: H - 3, class: 'tick'}, '1 h ago'),
    s('text', {x: W, y: H - 3, class: 'tick', 'text-anchor': 'end'}, 'now'));
  def.lines.forEach(([k], i) => {
    let seg = [], prev = null;
    const flush = () => {
      if (seg.length > 1) svg.append(s('polyline', {points: seg.join(' '), class: `line l${i}`}));
      else if (seg.length === 1) { const [cx, cy] = seg[0].split(','); svg.append(s('circle', {cx, cy, r: 2, class: `dot l${i}`})); }
      seg = [];
    };
    for (const p of pts) {
      const v = p[k];
      if (!isNum(v) || !(p.t_ms >= t0)) { flush(); prev = null; continue; }
      if (prev != null && p.t_ms - prev > gap) flush();
      seg.push(`${X(p.t_ms)},${Y(v)}`);
      prev = p.t_ms;
    }
    flush();
  });
  const legend = def.lines.length > 1 ? `: ${def.lines[0][1]} (solid line), ${def.lines[1][1]} (dashed line)` : '';
  const lastPts = pts.slice(-12);
  const table = h('table', null,
    h('thead', null, h('tr', null, h('th', {scope: 'col', text: 'Time'}), def.lines.map(([, n]) => h('th', {scope: 'col', text: n})))),
    h('tbody', null, lastPts.map((p) => h('tr', null, h('th', {scope: 'row', text: fmtClock(p.t_ms)}),
      def.lines.map(([k]) => h('td', {class: 'num', text: fmt(p[k])}))))));
  return h('figure', {class: 'plot', data: {series: def.id}},
    h('figcaption', {text: title + legend}), svg,
    h('details', {open: open || null}, h('summary', {text: 'Data'}), wrapTable(table, `${title}, last ${lastPts.length} points`)));
}

function driveFigures(x, now) {
  const c = x.capacity, p = x.power, hq = x.heal, sc = x.scrub;
  const up = !!x.up;
  return [
    ['State', h('span', {class: `state ${up ? 'up' : 'down'}`, text: up ? 'up' : 'down'})],
    ['Address', x.address || DASH],
    ['Failure domain', x.domain || DASH],
    ['In the map', x.map_state || DASH],
    ['Capacity', c ? `${fmtBytes(c.used_bytes)} used of ${fmtBytes(c.total_bytes)} (${pctOf(c.used_bytes, c.total_bytes)}), ${fmtBytes(c.free_bytes)} free` : DASH],
    ['Power', powerText(p)],
    ['Energy', p ? withMethod(`${fmtJ(p.joules)} since start, ${fmtJ(p.joules_today)} today`, p.method) : DASH],
    ['Power source', p && p.source ? p.source : DASH],
    ['Temperature', isNum(x.temperature_c) ? `${x.temperature_c.toFixed(1)} °C` : DASH],
    ['CPU busy', fmtPct(x.cpu_busy)],
    ['S3 traffic', `read ${fmtRate(x.read_bytes_per_second)}, written ${fmtRate(x.written_bytes_per_second)}`],
    ['Disk', `read ${fmtRate(x.disk_read_bytes_per_second)}, write ${fmtRate(x.disk_written_bytes_per_second)}`],
    ['Network', `in ${fmtRate(x.net_rx_bytes_per_second)}, out ${fmtRate(x.net_tx_bytes_per_second)}`],
    ['Requests', fmtPerS(x.requests_per_second)],
    ['Shards', fmtCount(x.shards)],
    ['Heal', hq ? `${fmtCount(hq.queued)} queued (${fmtBytes(hq.queued_bytes)}) at ${fmtRate(hq.rate_bytes_per_second)}${eta(hq.eta_seconds)}; ${fmtCount(hq.healed_shards)} healed` : DASH],
    ['Scrub', sc ? (sc.running ? `running, ${fmtBytes(sc.pass_bytes)} this pass` : `last complete ${fmtAgo(sc.last_complete_ms, now)}`) : DASH],
    ['Drain', moving(x.drain) ? moveText('drain', x.drain) : 'none'],
    ['Rebalance', moving(x.rebalance) ? moveText('rebalance', x.rebalance) : 'none'],
    ['Lifecycle', x.lifecycle ? (x.lifecycle.running ? 'running' : 'idle') : DASH],
    ['Error', x.error || 'none'],
  ];
}

function viewDrive(tok, id) {
  const figs = h('div');
  const err = h('p', {class: 'error', role: 'alert', hidden: true});
  const herr = h('p', {class: 'error', hidden: true});
  const plots = h('div', {class: 'plots', id: 'plots'});
  $('main').append(heading(1, `Drive ${id}`), h('p', null, h('a', {href: '#/overview', text: 'Back to the overview'})),
    err, heading(2, 'Now'), figs, heading(2, 'Last hour'),
    h('p', {class: 'muted', text: 'Sampled on the drive; refreshed every 10 s while this tab is visible.'}), herr, plots);
  let method = null, histAt = 0, ready = false;
  startPoll(async () => {
    try {
      const ov = await getJson('api/overview');
      if (!live(tok)) return false;
      const x = (ov.drives || []).find((d) => d.id === id);
      err.hidden = !!x;
      if (x) {
        method = x.power ? x.power.method : method;
        figs.replaceChildren(kv(driveFigures(x, ov.now_ms || Date.now())));
      } else {
        err.textContent = `There is no drive ${id} in the cluster map.`;
        figs.replaceChildren();
      }
    } catch (e) {
      if (!live(tok) || e.status === 401) return false;
      showErr(err, e);
      if (e.status === 403) return false;
    }
    if (Date.now() - histAt >= 10000) {
      histAt = Date.now();
      try {
        const hist = await getJson(`api/drives/${encodeURIComponent(id)}/history`);
        if (!live(tok)) return false;
        herr.hidden = true;
        const open = new Set(Array.from(plots.querySelectorAll('figure')).filter((f) => f.querySelector('details').open).map((f) => f.dataset.series));
        plots.replaceChildren(...PLOTS.filter((d) => d.id !== 'power' || (hist.points || []).some((p) => isNum(p.watts)))
          .map((d) => plot(d, hist, d.id === 'power' ? `Power, watts (${method || 'method unknown'})` : d.title, open.has(d.id))));
      } catch (e) {
        if (!live(tok) || e.status === 401) return false;
        showErr(herr, e);
      }
    }
    if (!ready) { ready = true; document.body.dataset.ready = 'drive'; }
  }, 2000);
}

// ---- buckets
function viewBuckets(tok) {
  const list = h('ul', {id: 'bucket-list', class: 'plain'});
  const err = h('p', {class: 'error', role: 'alert', hidden: true});
  const input = h('input', {...TXT, id: 'new-bucket', required: true});
  const btn = h('button', {id: 'create-bucket', type: 'submit', text: 'Create bucket'});
  async function load() {
    try {
      const doc = await s3xml('GET', 'api/s3/');
      if (!live(tok)) return;
      err.hidden = true;
      const items = doc ? byTag(doc, 'Bucket').map((b) => [childText(b, 'Name') || '', childText(b, 'CreationDate')]) : [];
      list.replaceChildren(...(items.length ? items.map(([name, date]) =>
        h('li', null, h('a', {href: bucketHash(name), data: {bucket: name}, text: name}),
          date ? h('span', {class: 'muted', text: ` created ${fmtDate(date)}`}) : null))
        : [h('li', {class: 'muted', text: 'No buckets yet.'})]));
    } catch (e) {
      if (live(tok) && e.status !== 401) showErr(err, e);
    }
    if (live(tok)) document.body.dataset.ready = 'buckets';
  }
  const form = h('form', {id: 'create-bucket-form', class: 'row', onsubmit: async (e) => {
    e.preventDefault();
    const name = input.value.trim();
    if (!name) return;
    btn.disabled = true;
    try {
      await call('PUT', s3url(name));
      input.value = '';
      say(`Bucket ${name} created.`);
      await load();
    } catch (ex) {
      if (ex.status !== 401) say(`Could not create bucket ${name}: ${ex}`);
    }
    btn.disabled = false;
  }}, h('div', {class: 'field'}, h('label', {for: 'new-bucket', text: 'New bucket name'}), input), h('div', {class: 'field'}, btn));
  $('main').append(heading(1, 'Buckets'), err, list, heading(2, 'Create a bucket'), form);
  load();
}

function downloadHref(bucket, key) {
  const name = key.split('/').pop() || 'download';
  const ascii = name.replace(/[^\x20-\x7e]|["\\]/g, '_');
  let disp = `attachment; filename="${ascii}"`;
  if (ascii !== name) disp += `; filename*=UTF-8''${encodeURIComponent(name).replace(/['()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase())}`;
  return {href: s3url(bucket, key, 'response-content-disposition=' + encodeURIComponent(disp)), name};
}

function viewBucket(tok, bucket, prefix) {
  let token = '', stack = [], nextToken = '', listSeq = 0;
  const crumbs = h('ol');
  const segs = [];
  let acc = '';
  for (const part of prefix ? prefix.split('/').slice(0, prefix.endsWith('/') ? -1 : undefined) : []) {
    acc += part + (acc.length + part.length < prefix.length ? '/' : '');
    segs.push([part || '(empty)', acc]);
  }
  const crumb = (text, href, cur) => h('li', null, h('a', {href, text, 'aria-current': cur ? 'page' : null}));
  add(crumbs, [crumb('Buckets', '#/buckets'), crumb(bucket, bucketHash(bucket), !segs.length),
    segs.map(([t, p], i) => crumb(t, bucketHash(bucket, p), i === segs.length - 1))]);

  const err = h('p', {class: 'error', role: 'alert', hidden: true});
  const folders = h('ul', {id: 'folders', class: 'folders', hidden: true});
  const tbody = h('tbody');
  const table = h('table', {id: 'objects', 'aria-labelledby': 'objects-h'},
    h('thead', null, h('tr', null, ['Key', 'Size', 'Last modified', 'Actions'].map((c) => h('th', {scope: 'col', text: c})))), tbody);
  const prev = h('button', {id: 'prev-page', type: 'button', text: 'Previous page', disabled: true});
  const next = h('button', {id: 'next-page', type: 'button', text: 'Next page', disabled: true});
  const detail = h('section', {id: 'object-detail', class: 'panel', 'aria-labelledby': 'detail-h', hidden: true});
  const objectsH = heading(2, 'Objects', 'objects-h');
  objectsH.tabIndex = -1;

  // upload form
  const file = h('input', {id: 'upload-file', type: 'file'});
  const keyIn = h('input', {...TXT, id: 'upload-key', placeholder: prefix + '(file name)'});
  const upBtn = h('button', {id: 'upload-button', type: 'submit', class: 'primary', text: 'Upload'});
  const prog = h('progress', {id: 'upload-progress', max: '100', value: '0', 'aria-label': 'Upload progress'});
  const status = h('p', {id: 'upload-status', role: 'status'});
  file.addEventListener('change', () => { keyIn.placeholder = prefix + (file.files[0] ? file.files[0].name : '(file name)'); });
  const upForm = h('form', {id: 'upload-form', onsubmit: async (e) => {
    e.preventDefault();
    const f = file.files[0];
    if (!f) { status.dataset.state = 'error'; status.textContent = 'Choose a file first.'; return; }
    const key = keyIn.value || prefix + f.name;
    upBtn.disabled = true;
    prog.value = 0;
    status.dataset.state = 'running';
    status.textContent = `uploading ${key}, ${f.size} bytes…`;
    try {
      await upload(bucket, key, f, (b) => { prog.value = f.size ? Math.min(100, Math.floor((b / f.size) * 100)) : 0; });
      prog.value = 100;
      status.dataset.state = 'done';
      status.textContent = `done: ${key}, ${f.size} bytes`;
      file.value = '';
      keyIn.value = '';
      if (live(tok)) await list();
    } catch (ex) {
      status.dataset.state = 'error';
      status.textContent = `upload of ${key} failed: ${ex}`;
    }
    upBtn.disabled = false;
  }},
  h('div', {class: 'row'},
    h('div', {class: 'field'}, h('label', {for: 'upload-file', text: 'File'}), file),
    h('div', {class: 'field'}, h('label', {for: 'upload-key', text: 'Key (optional)'}), keyIn),
    h('div', {class: 'field'}, upBtn)),
  prog, status);

  async function showDetail(key) {
    detail.hidden = false;
    detail.dataset.key = key;
    const dh = heading(2, 'Object details', 'detail-h');
    dh.tabIndex = -1;
    detail.replaceChildren(dh, h('p', {class: 'key', text: key}), h('p', {text: 'Loading…'}));
    dh.focus();
    try {
      const res = await call('HEAD', s3url(bucket, key), {headers: {'x-amz-checksum-mode': 'ENABLED'}});
      if (!live(tok) || detail.dataset.key !== key) return;
      const g = (n) => res.headers.get(n);
      const len = g('content-length') == null ? null : Number(g('content-length'));
      const pairs = [['Size', fmtExact(len)], ['Content type', g('content-type') || DASH], ['ETag', g('etag') || DASH],
        ['Last modified', g('last-modified') ? fmtDate(g('last-modified')) : DASH]];
      if (g('x-amz-version-id')) pairs.push(['Version', g('x-amz-version-id')]);
      const extra = [];
      res.headers.forEach((v, n) => { if (n.startsWith('x-amz-checksum-') || n.startsWith('x-amz-meta-')) extra.push([n, v]); });
      extra.sort((a, b) => a[0].localeCompare(b[0]));
      if (!extra.some(([n]) => n.startsWith('x-amz-checksum-') && n !== 'x-amz-checksum-type')) pairs.push(['Checksums', 'none stored']);
      detail.replaceChildren(dh, h('p', {class: 'key', text: key}), kv(pairs.concat(extra)));
    } catch (e) {
      if (live(tok) && e.status !== 401 && detail.dataset.key === key) detail.replaceChildren(dh, h('p', {class: 'key', text: key}), h('p', {class: 'error', text: String(e)}));
    }
  }

  function objectRow(o) {
    const rel = o.key.slice(prefix.length) || o.key;
    const dl = downloadHref(bucket, o.key);
    const del = h('button', {type: 'button', class: 'delete', text: 'Delete', 'aria-label': `Delete ${rel}`});
    const reset = () => { if (!del.disabled) { delete del.dataset.confirm; del.classList.remove('confirm'); del.textContent = 'Delete'; del.setAttribute('aria-label', `Delete ${rel}`); } };
    del.addEventListener('blur', reset);
    del.addEventListener('click', async () => {
      if (!del.dataset.confirm) {
        del.dataset.confirm = '1';
        del.classList.add('confirm');
        del.textContent = 'Confirm delete';
        del.setAttribute('aria-label', `Confirm delete ${rel}`);
        return;
      }
      del.disabled = true;
      try {
        await call('DELETE', s3url(bucket, o.key));
        say(`Deleted ${o.key}.`);
        if (detail.dataset.key === o.key) detail.hidden = true;
        if (live(tok)) { objectsH.focus(); await list(); }
      } catch (e) {
        if (e.status !== 401) say(`Could not delete ${o.key}: ${e}`);
        del.disabled = false;
        reset();
      }
    });
    return h('tr', {data: {key: o.key}},
      h('td', {class: 'wrap key', text: rel}),
      h('td', {class: 'num', text: fmtBytes(o.size)}),
      h('td', null, o.modified ? h('time', {datetime: o.modified, text: fmtDate(o.modified)}) : DASH),
      h('td', null, h('div', {class: 'actions'},
        h('button', {type: 'button', class: 'details', text: 'Details', 'aria-label': `Details of ${rel}`, onclick: () => showDetail(o.key)}),
        h('a', {class: 'download', href: dl.href, download: dl.name, text: 'Download', 'aria-label': `Download ${rel}`}),
        h('a', {class: 'op', href: opHash(bucket, o.key), text: 'Run an operation', 'aria-label': `Run an operation on ${rel}`}),
        del)));
  }

  async function list() {
    const seq = ++listSeq;
    delete document.body.dataset.ready;
    next.disabled = prev.disabled = true;
    try {
      const doc = await s3xml('GET', s3url(bucket, null, qs({'list-type': '2', delimiter: '/', prefix, 'max-keys': '100', 'continuation-token': token})));
      if (!live(tok) || seq !== listSeq) return;
      if (!doc) throw new ApiError(0, 'BadAnswer', 'empty listing');
      const root = doc.documentElement;
      const objs = kids(root, 'Contents').map((c) => ({key: childText(c, 'Key') || '', size: Number(childText(c, 'Size')), modified: childText(c, 'LastModified')}));
      const cps = kids(root, 'CommonPrefixes').map((c) => childText(c, 'Prefix')).filter(Boolean);
      nextToken = childText(root, 'IsTruncated') === 'true' ? childText(root, 'NextContinuationToken') || '' : '';
      err.hidden = true;
      folders.hidden = !cps.length;
      folders.replaceChildren(...cps.map((p) => h('li', null, h('a', {href: bucketHash(bucket, p), data: {prefix: p}, text: p.slice(prefix.length) || p}))));
      tbody.replaceChildren(...(objs.length ? objs.map(objectRow)
        : [h('tr', {class: 'empty'}, h('td', {colspan: '4', class: 'muted', text: cps.length ? 'No objects at this level.' : 'No objects here.'}))]));
    } catch (e) {
      if (!live(tok) || seq !== listSeq) return;
      if (e.status === 401) return;
      showErr(err, e);
      tbody.replaceChildren();
      nextToken = '';
    }
    next.disabled = !nextToken;
    prev.disabled = !stack.length;
    document.body.dataset.ready = 'bucket';
  }
  next.addEventListener('click', () => { if (!nextToken) return; stack.push(token); token = nextToken; list(); });
  prev.addEventListener('click', () => { if (!stack.length) return; token = stack.pop(); list(); });

  $('main').append(heading(1, `Bucket ${bucket}`),
    h('nav', {class: 'crumbs', 'aria-label': 'Path'}, crumbs),
    heading(2, 'Upload'), upForm,
    objectsH, err, folders, wrapTable(table, 'Objects table'),
    h('div', {class: 'pager'}, prev, next), detail);
  list();
}

// ---- near-data operation
const OPS = {
  stats: 'Statistics over numbers', checksum: 'Checksum', grep: 'Search lines (grep)', compressibility: 'Compressibility (zstd level 3)',
};
const FORMATS = ['f64le', 'f32le', 'i64le', 'i32le', 'u8', 'i8', 'u16le', 'u32le', 'u64le'];
const ALGOS = ['crc32c', 'crc64nvme', 'blake3', 'sha256'];

function viewOp(tok, q) {
  const opt = (v, t) => h('option', {value: v, text: t || v});
  const field = (id, label, input, forOp) => h('div', {class: 'field', data: forOp ? {for: forOp} : null}, h('label', {for: id, text: label}), input);
  const bucket = h('input', {...TXT, id: 'op-bucket', required: true, value: q.get('bucket') || ''});
  const key = h('input', {...TXT, id: 'op-key', required: true, value: q.get('key') || ''});
  const sel = h('select', {id: 'op-select'}, Object.entries(OPS).map(([v, t]) => opt(v, t)));
  const format = h('select', {id: 'op-format'}, FORMATS.map((f) => opt(f)));
  const algo = h('select', {id: 'op-algorithm'}, ALGOS.map((a) => opt(a)));
  const pattern = h('input', {...TXT, id: 'op-pattern'});
  const run = h('button', {id: 'op-run', type: 'submit', class: 'primary', text: 'Run'});
  const result = h('pre', {id: 'op-result', tabindex: '0', 'aria-label': 'Result', text: 'No operation run yet.'});
  const saved = h('p', {id: 'op-saved', class: 'saved'});
  const cost = h('table', {id: 'op-cost', 'aria-label': 'Cost'});
  const drives = h('table', {id: 'op-drives', 'aria-label': 'Cost per drive'});
  const costBox = h('div', {hidden: true}, saved, wrapTable(cost, 'Cost table'), heading(3, 'Per drive'), wrapTable(drives, 'Per drive table'));
  if (q.get('op') && OPS[q.get('op')]) sel.value = q.get('op');
  const opts = [field('op-format', 'Number format', format, 'stats'), field('op-algorithm', 'Algorithm', algo, 'checksum'),
    field('op-pattern', 'Pattern (regular expression)', pattern, 'grep'),
    h('p', {class: 'muted', data: {for: 'compressibility'}, text: 'Codec zstd, level 3.'})];
  const sync = () => { for (const o of opts) o.hidden = o.dataset.for !== sel.value; };
  sel.addEventListener('change', sync);
  sync();

  function showCost(c) {
    const obj = c.object_bytes, carried = (c.network_bytes || 0) + (c.client_bytes || 0);
    const sv = Math.max(0, (obj || 0) - carried);
    const pct = obj > 0 ? Number(((sv / obj) * 100).toFixed(1)) : 0;
    saved.textContent = `The network carried ${fmtBytes(carried)} instead of the ${fmtBytes(obj)} a download would have: ${fmtBytes(sv)} saved (${pct}%)`;
    Object.assign(saved.dataset, {carried: String(carried), download: String(obj), saved: String(sv), percent: String(pct)});
    const rows = [
      ['Wall time', isNum(c.wall_seconds) ? `${c.wall_seconds.toFixed(3)} s` : DASH, c.wall_seconds, 'wall_seconds'],
      ['Object bytes (a download)', fmtExact(obj), obj, 'object_bytes'],
      ['Between drives (network_bytes)', fmtExact(c.network_bytes), c.network_bytes, 'network_bytes'],
      ['To the client (client_bytes)', fmtExact(c.client_bytes), c.client_bytes, 'client_bytes'],
      ['Read from drives', fmtExact(c.drive_bytes_read), c.drive_bytes_read, 'drive_bytes_read'],
      ['Drive CPU time', isNum(c.drive_cpu_seconds) ? `${c.drive_cpu_seconds.toFixed(3)} s` : DASH, c.drive_cpu_seconds, 'drive_cpu_seconds'],
      ['Through the coordinator', fmtExact(c.coordinator_bytes), c.coordinator_bytes, 'coordinator_bytes'],
      ['Parity used', c.parity_used ? 'yes' : 'no', c.parity_used, 'parity_used'],
      ['Energy', withMethod(fmtJ(c.energy_joules), c.energy_method), c.energy_joules, 'energy_joules'],
    ];
    cost.replaceChildren(h('tbody', null, rows.map(([k, v, raw, name]) =>
      h('tr', {data: {field: name}}, h('th', {scope: 'row', text: k}), h('td', {text: v, data: {value: raw == null ? '' : String(raw)}})))));
    const head = ['Drive', 'Shard', 'Bytes read', 'CPU s', 'Answer bytes', 'Energy', 'Failed'];
    drives.replaceChildren(h('thead', null, h('tr', null, head.map((t) => h('th', {scope: 'col', text: t})))),
      h('tbody', null, (c.drives || []).map((d) => h('tr', {data: {drive: String(d.drive)}},
        h('th', {scope: 'row', text: String(d.drive ?? DASH)}), h('td', {class: 'num', text: String(d.shard ?? DASH)}),
        h('td', {class: 'num', text: fmtBytes(d.bytes_read)}), h('td', {class: 'num', text: isNum(d.cpu_seconds) ? d.cpu_seconds.toFixed(3) : DASH}),
        h('td', {class: 'num', text: fmtBytes(d.answer_bytes)}), h('td', {class: 'num', text: withMethod(fmtJ(d.energy_joules), c.energy_method)}),
        h('td', {text: d.failed ? (d.failed === true ? 'yes' : `yes: ${d.failed}`) : 'no'})))));
    costBox.hidden = false;
  }

  const form = h('form', {id: 'op-form', onsubmit: async (e) => {
    e.preventDefault();
    const b = bucket.value.trim(), k = key.value;
    const op = sel.value, body = {op};
    if (op === 'stats') body.format = format.value;
    else if (op === 'checksum') body.algorithm = algo.value;
    else if (op === 'grep') body.pattern = pattern.value;
    else if (op === 'compressibility') Object.assign(body, {codec: 'zstd', level: 3});
    costBox.hidden = true;
    result.dataset.state = 'error';
    if (!b || !k) { result.textContent = 'Enter a bucket and a key.'; return; }
    if (op === 'grep' && !pattern.value) { result.textContent = 'Enter a pattern.'; pattern.focus(); return; }
    run.disabled = true;
    result.dataset.state = 'running';
    result.textContent = `Running ${op} on ${b}/${k}…`;
    try {
      const res = await call('POST', s3url(b, k, 'oed-op'), {headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
      const text = await res.text();
      let j;
      try { j = JSON.parse(text); } catch { throw parseError(res.status, 'xml', text, 'the answer is not JSON'); }
      if (!live(tok)) return;
      result.textContent = JSON.stringify(j.result, null, 2);
      if (j.cost) showCost(j.cost);
      result.dataset.state = 'done';
      say(`${op} on ${b}/${k} done.`);
    } catch (ex) {
      if (!live(tok)) return;
      result.dataset.state = 'error';
      result.textContent = String(ex);
    }
    run.disabled = false;
  }},
  h('div', {class: 'row'}, field('op-bucket', 'Bucket', bucket), field('op-key', 'Key', key)),
  h('div', {class: 'row'}, field('op-select', 'Operation', sel), opts), run);

  $('main').append(heading(1, 'Near-data operation'),
    h('p', {class: 'muted', text: 'Runs on the drives that hold the object; only the answer travels back.'}),
    form, heading(2, 'Result'), result, heading(2, 'Cost'), costBox);
  document.body.dataset.ready = 'op';
}

// ---- start
async function boot() {
  $('skip').addEventListener('click', (e) => { e.preventDefault(); $('main').focus(); });
  $('logout').addEventListener('click', async () => {
    try { await call('POST', 'api/logout'); } catch { /* signed out locally either way */ }
    showLogin();
    say('Signed out.');
  });
  window.addEventListener('hashchange', () => route(true));
  try {
    const res = await call('GET', 'api/session', {login: true});
    setSession(await res.json());
    route(false);
  } catch (e) {
    showLogin(e.status === 401 ? '' : String(e));
  }
}
boot();
})();
