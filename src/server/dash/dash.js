// strata's dashboard: the KV cache view (GET /slots and GET /metrics once a second) and a chat
// box (POST /v1/chat/completions, streamed). The API key lives only in this page's memory; it
// goes with every request as "Authorization: Bearer KEY". Text from the server is shown with
// textContent, never parsed as HTML.
'use strict';

const $ = (id) => document.getElementById(id);
let apiKey = '';
const REFRESH_MS = 1000;

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  if (apiKey) h['Authorization'] = 'Bearer ' + apiKey;
  return h;
}

// The Prometheus text format's samples as name{labels} -> value (comments and blank lines
// skipped); our label values never hold '}'.
function parseProm(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const r = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (r) m.set(r[1] + (r[2] || ''), Number(r[3]));
  }
  return m;
}

function setText(id, v) { $(id).textContent = v; }
function pct(num, den) { return den > 0 ? (100 * num / den).toFixed(1) + '%' : '-'; }

// ---- the KV cache view -------------------------------------------------------------------

const TIER_CLASS = { R: 't-R', D: 't-D', S: 't-S', s: 't-s', '.': 't-dot' };
const TIER_NAME = { R: 'RAM', D: 'disk only', S: 'shared, RAM', s: 'shared, disk only', '.': 'not yet written' };

function renderPool(pool) {
  setText('pool-pages', pool.pages);
  setText('pool-used', pool.used);
  setText('pool-cached', pool.cached);
  setText('pool-free', pool.free);
  setText('pool-ram', pool.ram_pages);
  setText('pool-hot', pool.hot);
  setText('pool-cold', pool.cold);
  const n = pool.pages > 0 ? pool.pages : 1;
  $('bar-used').style.width = (100 * pool.used / n) + '%';
  $('bar-cached').style.width = (100 * pool.cached / n) + '%';
  $('bar-free').style.width = (100 * pool.free / n) + '%';
}

function renderSlots(j) {
  const box = $('slots');
  box.replaceChildren();
  if (!j.slots.length) {
    const p = document.createElement('p');
    p.className = 'empty';
    p.textContent = 'no running requests';
    box.append(p);
    return;
  }
  for (const sl of j.slots) {
    const div = document.createElement('div');
    div.className = 'slot';
    div.dataset.id = sl.id;
    const head = document.createElement('div');
    head.className = 'slot-head';
    const add = (cls, text) => {
      const s = document.createElement('span');
      if (cls) s.className = cls;
      s.textContent = text;
      head.append(s);
    };
    add('', '#' + sl.id);
    add('state', sl.state);
    add('', 'prompt ' + sl.n_prompt + ' (cached ' + sl.n_cached + ')');
    add('', 'generated ' + sl.n_generated);
    add('', 'pages: ' + sl.pages_hot + ' RAM, ' + sl.pages_cold + ' disk, ' + sl.pages_shared + ' shared');
    add('', sl.t_total.toFixed(1) + ' s');
    div.append(head);
    const strip = document.createElement('div');
    strip.className = 'strip';
    for (let i = 0; i < sl.pages.length; i++) {
      const c = sl.pages[i];
      const cell = document.createElement('span');
      cell.className = 'cell ' + (TIER_CLASS[c] || 't-dot');
      cell.title = 'page ' + i + ': ' + (TIER_NAME[c] || c);
      strip.append(cell);
    }
    div.append(strip);
    if (sl.prompt !== undefined || sl.output !== undefined) {
      const t = document.createElement('div');
      t.className = 'msg assistant';
      t.textContent = (sl.prompt || '') + (sl.output || '');
      div.append(t);
    }
    box.append(div);
  }
}

// The previous refresh's generation counter and when it was read, for tok/s.
let lastGen = null;

function renderMetrics(m, slotsJson) {
  const g = (k) => m.get(k) || 0;
  setText('metrics-state', 'on');
  setText('hit-rate', pct(g('strata_prompt_tokens_cached_total'), g('strata_prompt_tokens_total')));
  setText('prefix-rate', pct(g('strata_prefix_cache_hits_tokens_total'), g('strata_prefix_cache_queries_tokens_total')));
  setText('req-count', g('strata_requests_running') + ' / ' + g('strata_requests_waiting'));
  const now = performance.now(), gen = g('strata_generation_tokens_total');
  if (lastGen && now > lastGen.t && gen >= lastGen.n)
    setText('gen-rate', ((gen - lastGen.n) / ((now - lastGen.t) / 1000)).toFixed(1) + ' tok/s');
  lastGen = { t: now, n: gen };
}

// Without --metrics the lifetime counters are missing: the hit rate is the running
// requests' own, and tok/s is not known.
function renderMetricsOff(j) {
  setText('metrics-state', 'metrics off');
  let p = 0, c = 0;
  if (j) for (const sl of j.slots) p += sl.n_prompt, c += sl.n_cached;
  setText('hit-rate', j ? pct(c, p) + ' (running requests)' : '-');
  setText('prefix-rate', 'metrics off');
  setText('gen-rate', 'metrics off');
  setText('req-count', j ? String(j.slots.length) : '-');
  lastGen = null;
}

function setStatus(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('bad', !!bad);
}

async function errorText(r) {
  try {
    const j = await r.json();
    if (j && j.error && j.error.message) return r.status + ': ' + j.error.message;
  } catch (e) { /* not JSON */ }
  return 'HTTP ' + r.status;
}

async function refresh() {
  try {
    const [rs, rm] = await Promise.all([
      fetch('/slots', { headers: authHeaders(), cache: 'no-store' }),
      fetch('/metrics', { headers: authHeaders(), cache: 'no-store' }),
    ]);
    let j = null;
    if (rs.ok) {
      j = await rs.json();
      renderPool(j.pool);
      renderSlots(j);
      setStatus('n_ctx ' + j.n_ctx + ', page ' + j.page_size + ' tokens, ' + j.n_parallel + ' at once');
    } else {
      setStatus('/slots: ' + await errorText(rs) + (rs.status === 401 ? ' (enter the API key)' : ''), true);
    }
    if (rm.ok) renderMetrics(parseProm(await rm.text()), j);
    else if (rm.status === 501) renderMetricsOff(j);
    else setText('metrics-state', await errorText(rm));
  } catch (e) {
    setStatus('server unreachable: ' + e.message, true);
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

// ---- chat --------------------------------------------------------------------------------

const conversation = [];   // {role, content} of the conversation so far
let ctrl = null;      // the running reply's AbortController

function addMsg(cls, who, text) {
  const d = document.createElement('div');
  d.className = 'msg ' + cls;
  const w = document.createElement('span');
  w.className = 'who';
  w.textContent = who;
  const t = document.createElement('span');
  t.className = 'text';
  t.textContent = text;
  d.append(w, t);
  $('log').append(d);
  $('log').scrollTop = $('log').scrollHeight;
  return t;
}

// The events of one SSE block ("data: ..." lines up to a blank line).
function sseData(block) {
  const out = [];
  for (const line of block.split('\n'))
    if (line.startsWith('data:')) out.push(line.slice(5).trim());
  return out;
}

async function send() {
  const text = $('prompt').value.trim();
  if (!text || ctrl) return;
  $('prompt').value = '';
  conversation.push({ role: 'user', content: text });
  addMsg('user', 'you', text);
  const out = addMsg('assistant', 'strata', '');
  const body = { messages: conversation, stream: true };
  const mt = parseInt($('max-tokens').value, 10);
  if (mt > 0) body.max_tokens = mt;
  ctrl = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  let reply = '', finish = null;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', signal: ctrl.signal, body: JSON.stringify(body),
      headers: authHeaders({ 'Content-Type': 'application/json' }),
    });
    if (!r.ok) throw new Error(await errorText(r));
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true }).replace(/\r/g, '');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const d of sseData(block)) {
          if (d === '[DONE]') continue;
          const j = JSON.parse(d);
          if (j.error) throw new Error(j.error.message);
          const c = j.choices && j.choices[0];
          if (!c) continue;
          if (c.delta && c.delta.content) {
            reply += c.delta.content;
            out.textContent = reply;
            $('log').scrollTop = $('log').scrollHeight;
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    }
    conversation.push({ role: 'assistant', content: reply });
    out.parentElement.dataset.finish = finish || '';
  } catch (e) {
    if (reply) conversation.push({ role: 'assistant', content: reply });
    else conversation.pop();  // the question had no answer: not part of the conversation
    addMsg('error', 'error', e.name === 'AbortError' ? 'stopped' : e.message);
  } finally {
    ctrl = null;
    $('send').disabled = false;
    $('stop').disabled = true;
  }
}

function init() {
  $('api-key').addEventListener('input', (ev) => { apiKey = ev.target.value; });
  $('chat-form').addEventListener('submit', (ev) => { ev.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); send(); }
  });
  $('stop').addEventListener('click', () => { if (ctrl) ctrl.abort(); });
  $('clear').addEventListener('click', () => {
    if (ctrl) ctrl.abort();
    conversation.length = 0;
    $('log').replaceChildren();
  });
  refresh();
}

init();
