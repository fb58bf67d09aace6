/* Postroom web chat: one WebSocket, no build step (ES modules); the one dependency, markdown-it,
 * is a vendored static file (see static/vendor/README.md). The operator view is the dashboard's
 * signed-in session (its cookie goes with the socket): no token is ever put in a URL.
 *
 * Everything that comes from the server is put into the page with textContent or
 * createTextNode (never innerHTML), so message content can never become markup.
 */

import {
  $,
  h,
  fmtInt,
  utf8Length,
  initialOf,
  hueOf,
  parseTime,
  hhmm,
  dayKey,
  dayLabel,
  timeEl,
  linkifyInto,
} from './dom.js';
import { renderMarkdown } from './markdown.js';
import { picker as filePicker, render as renderAttachments } from './attachments.js';

// ---------------------------------------------------------------- constants

const CONTENT_LIMIT = 65536;        // server limit, in UTF-8 bytes
const COUNTER_FROM = 60000;         // show the counter from here on
const PING_EVERY = 25000;
const DEAD_AFTER = 65000;           // no frame at all for this long: reconnect
const BACKOFF_MAX = 15000;
const TYPING_TIMEOUT = 60000;
const GROUP_WINDOW = 5 * 60 * 1000; // consecutive bubbles within this window are grouped
const ACCEPT_GRACE = 10000;         // accepted but the stored copy never arrived
const NEAR_BOTTOM = 96;
const COMPOSER_MAX_LINES = 8;

// Close codes the server uses to refuse a socket, in words.
const CLOSE_REASONS = {
  4401: 'sign in on the dashboard to use the operator view',
  4403: 'access denied',
  4404: 'no such channel',
};

const TRACE_LABELS = {
  thinking: ['💭', 'thinking'],
  tool_use: ['🛠', 'tool call'],
  tool_result: ['📋', 'tool result'],
  result_meta: ['ℹ️', 'run info'],
};


// ---------------------------------------------------------------- state

function channelFromPath() {
  const m = /^\/chat\/([a-z0-9_-]+)\/?$/.exec(location.pathname);
  return m ? m[1] : 'main';
}

// A token in the address bar (an old bookmark) is never sent on: it is removed at once.
if (new URLSearchParams(location.search).has('token')) {
  history.replaceState(null, '', location.pathname);
}
const state = {
  channel: channelFromPath(),
  assistant: 'Postroom',
  chatJid: null,
  sender: null,
  operator: false,
  helloSeen: false,
  historySeen: false,
  records: [],               // sorted by seq; {key, msg, el, seq, order, date, day, time, groupKey, folder}
  byKey: new Map(),
  order: 0,
  seps: new Map(),
  pending: new Map(),        // client_id -> pending send
  storedToClient: new Map(), // stored id -> client_id
  folders: new Set(),
  firstFolder: new Map(),
  filter: '',
  typing: new Map(),         // chat_jid -> {folder, timer}
  streams: new Map(),        // job_id -> an answer shown while it is written (see onStream)
  storedAnswers: new Set(),  // ids of stored answers shown: a stream naming one is done
  answered: new Set(),       // job ids whose stored answer arrived: late stream frames go
  ws: null,
  open: false,
  attempt: 0,
  retryTimer: null,
  pingTimer: null,
  lastFrameAt: 0,
  everConnected: false,
  closeReason: '',
  clientSeq: 0,
  picker: null,              // the composer's files (attachments.js)
  unread: 0,
};

const els = {};

// ---------------------------------------------------------------- rendering of messages

const msgKey = (m) => `${m.chat_jid}\u0000${m.id}`;
const isOwn = (m) => !!state.sender && m.sender === state.sender;
const isCommand = (m) => !!(m.metadata && m.metadata.command === true);

function chatTag(jid) {
  if (!state.operator || !jid) return null;
  return h('span', { class: 'chat-tag', title: `Chat ${jid}`, text: jid });
}

function topicTag(topic) {
  return topic ? h('span', { class: 'tag topic', title: `Topic ${topic}`, text: `#${topic}` }) : null;
}

function observedTag(m) {
  return m.observed ? h('span', { class: 'tag observed', title: 'Observed: stored for context, no reply', text: 'observed' }) : null;
}

function assistantAvatar() {
  return h('div', { class: 'avatar', 'aria-hidden': 'true', text: initialOf(state.assistant) });
}

function personAvatar(name) {
  const node = h('div', { class: 'avatar person', 'aria-hidden': 'true', text: initialOf(name) });
  const hue = hueOf(name || '?');
  node.style.background = `hsl(${hue} 28% 56%)`;
  return node;
}

function stampEl(m, date, extra) {
  return h('span', { class: 'stamp' }, extra, topicTag(m.topic), observedTag(m), timeEl(date));
}

function baseAttrs(m, cls) {
  return {
    class: `msg ${cls}`,
    'data-testid': 'message',
    'data-type': m.message_type || 'user',
    'data-id': m.id,
    'data-chat': m.chat_jid,
    'data-seq': m.seq,
  };
}

function replyQuote(m) {
  if (!m.reply_to) return null;
  const target = state.byKey.get(`${m.chat_jid}\u0000${m.reply_to}`);
  if (!target) return null;
  const snippet = String(target.msg.content || '').replace(/\s+/g, ' ').slice(0, 90);
  return h('button', {
    type: 'button',
    class: 'reply-quote',
    title: 'Show the message this replies to',
    dataset: { target: target.key },
  }, h('span', { 'aria-hidden': 'true', text: '↩ ' }), snippet);
}

function renderUser(m, date) {
  const own = isOwn(m);
  const name = m.sender_name || m.sender || 'someone';
  const cls = ['user', own ? 'out' : 'in'];
  if (m.observed) cls.push('observed');

  if (isCommand(m)) {
    cls.push('cmd');
    const head = (state.operator || !own)
      ? h('div', { class: 'msg-head' },
        own ? null : h('span', { class: 'name', text: name }),
        chatTag(m.chat_jid))
      : null;
    return h('div', baseAttrs(m, cls.join(' ')),
      head,
      h('div', { class: 'row' },
        h('div', { class: 'row-body' },
          h('span', { class: 'chip', title: 'Command' },
            h('span', { class: 'visually-hidden', text: 'Command: ' }),
            h('code', { text: m.content || '' }),
            topicTag(m.topic),
            observedTag(m),
            timeEl(date, 'chip-time')))));
  }

  const text = h('div', { class: 'text' });
  linkifyInto(text, String(m.content || ''));
  text.append(stampEl(m, date));
  const files = attachmentsOf(m);
  let head = null;
  if (!own || state.operator) {
    head = h('div', { class: `msg-head${own ? '' : ' indent'}` },
      own ? null : h('span', { class: 'name', text: name }),
      !own && m.sender_name && m.sender !== m.sender_name
        ? h('span', { class: 'folder', title: m.sender, text: m.sender }) : null,
      m.routed_to && state.operator ? h('span', { class: 'folder', text: `→ ${m.routed_to}` }) : null,
      chatTag(m.chat_jid));
  }
  return h('div', baseAttrs(m, cls.join(' ')),
    head,
    h('div', { class: 'row' },
      own ? null : personAvatar(name),
      h('div', { class: 'row-body' }, replyQuote(m), h('div', { class: 'bubble' }, files, text))));
}

/** A message's pictures and files (attachments.js), read with this page's cookie. */
function attachmentsOf(m) {
  return renderAttachments(m, state.channel);
}

function renderAssistant(m, date) {
  const md = renderMarkdown(m.content);
  const stamp = stampEl(m, date);
  const last = md.lastElementChild;
  if (last && last.tagName === 'P') last.append(stamp);
  else md.append(h('div', { class: 'stamp-line' }, stamp));
  return h('div', baseAttrs(m, 'assistant in'),
    h('div', { class: 'msg-head indent' },
      h('span', { class: 'name', text: state.assistant }),
      m.routed_to ? h('span', { class: 'folder', title: 'Folder', text: m.routed_to }) : null,
      chatTag(m.chat_jid)),
    h('div', { class: 'row' },
      assistantAvatar(),
      h('div', { class: 'row-body' }, replyQuote(m), h('div', { class: 'bubble' }, md))));
}

function centerMeta(m) {
  return state.operator ? h('div', { class: 'center-meta' }, chatTag(m.chat_jid)) : null;
}

function renderSystem(m, date) {
  const content = String(m.content || '');
  const long = content.length > 320 || content.split('\n').length > 4;
  const body = h('span', { class: 'system-body', text: content });
  const line = h('div', { class: `system-line${long ? ' clamped' : ''}` },
    h('span', { class: 'icon', 'aria-hidden': 'true', text: '⚙️' }),
    h('span', { class: 'visually-hidden', text: 'System: ' }),
    body, topicTag(m.topic), timeEl(date, 'stamp-inline'));
  if (long) {
    line.append(h('button', {
      type: 'button', class: 'link-button more', 'aria-expanded': 'false', text: 'Show more',
    }));
  }
  return h('div', baseAttrs(m, 'system center'), centerMeta(m), line);
}

function renderHost(m, date) {
  const content = String(m.content || '');
  return h('div', baseAttrs(m, 'host center'), centerMeta(m),
    h('div', { class: `host-pill${content.includes('\n') || content.length > 80 ? ' multiline' : ''}` },
      h('span', { class: 'icon', 'aria-hidden': 'true', text: '🏠' }),
      h('span', { class: 'visually-hidden', text: 'Notice: ' }),
      h('span', { class: 'host-body', text: content }),
      topicTag(m.topic),
      timeEl(date, 'stamp-inline')));
}

function renderToolResult(m, date) {
  const meta = m.metadata || {};
  const code = meta.exit_code;
  const ok = code == null || Number(code) === 0;
  const word = ok ? (code == null ? 'ok' : 'exit 0') : `exit ${code}`;
  return h('div', baseAttrs(m, `tool-result in no-avatar${ok ? '' : ' failed-tool'}`),
    state.operator ? h('div', { class: 'msg-head indent' }, chatTag(m.chat_jid)) : null,
    h('div', { class: 'row' },
      assistantAvatar(),
      h('div', { class: 'row-body' },
        h('div', { class: `tool ${ok ? 'ok' : 'bad'}` },
          h('div', { class: 'tool-head' },
            h('span', { 'aria-hidden': 'true', text: '🔧' }),
            h('span', { text: 'Command output' }),
            h('span', { class: 'status-word' },
              h('span', { 'aria-hidden': 'true', text: ok ? '✅ ' : '❌ ' }), word),
            topicTag(m.topic),
            h('span', { class: 'spacer' }),
            timeEl(date)),
          h('pre', { tabindex: '0', text: m.content || '' })))));
}

function tryJson(text) {
  const s = String(text || '').trim();
  if (!s || s.length > 200000 || !/^[[{]/.test(s)) return undefined;
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}

function shortValue(v) {
  if (v == null) return String(v);
  if (typeof v === 'object') return Array.isArray(v) ? `[${v.length}]` : '{…}';
  const s = String(v);
  return s.length > 40 ? `${s.slice(0, 39)}…` : s;
}

function renderTrace(m, date) {
  const [icon, label] = TRACE_LABELS[m.sender] || ['·', m.sender || 'trace'];
  const meta = m.metadata || {};
  const content = String(m.content || '');
  const data = tryJson(content);
  let preview = content.replace(/\s+/g, ' ').trim();
  let body;

  if (m.sender === 'thinking') {
    body = h('div', { class: 'thinking', text: content });
  } else if (m.sender === 'tool_use') {
    const name = (data && (data.name || data.tool)) || meta.tool || meta.name || '';
    const input = data && typeof data === 'object' && !Array.isArray(data)
      ? (data.input ?? data.arguments ?? data.args ?? data) : data;
    const args = input === undefined ? content : JSON.stringify(input, null, 2);
    preview = name ? `${name}${input && typeof input === 'object'
      ? ` ${Object.keys(input).slice(0, 3).map((k) => `${k}=${shortValue(input[k])}`).join(' ')}` : ''}` : preview;
    body = h('pre', { tabindex: '0', text: args });
  } else if (m.sender === 'result_meta' && data && typeof data === 'object' && !Array.isArray(data)) {
    const entries = Object.entries(data);
    preview = entries.filter(([, v]) => v == null || typeof v !== 'object').slice(0, 4)
      .map(([k, v]) => `${k}: ${shortValue(v)}`).join(' · ');
    body = h('dl', { class: 'kv' }, entries.map(([k, v]) => [
      h('dt', { text: k }),
      h('dd', { text: v !== null && typeof v === 'object' ? JSON.stringify(v) : String(v) }),
    ]));
  } else {
    body = h('pre', { tabindex: '0', text: data === undefined ? content : JSON.stringify(data, null, 2) });
  }
  if (preview.length > 140) preview = `${preview.slice(0, 139)}…`;

  return h('div', baseAttrs(m, 'trace in no-avatar'),
    state.operator ? h('div', { class: 'msg-head indent' }, chatTag(m.chat_jid)) : null,
    h('div', { class: 'row' },
      assistantAvatar(),
      h('div', { class: 'row-body' },
        h('details', { class: `trace-details trace-${m.sender || 'other'}` },
          h('summary', null,
            h('span', { class: 'chev', 'aria-hidden': 'true', text: '▶' }),
            h('span', { class: 'label' }, h('span', { 'aria-hidden': 'true', text: `${icon} ` }), label),
            preview ? h('span', { class: 'preview', text: preview }) : null,
            topicTag(m.topic),
            timeEl(date, 'trace-time')),
          h('div', { class: 'trace-body' }, body)))));
}

function renderMessage(m, date) {
  switch (m.message_type) {
    case 'assistant': return renderAssistant(m, date);
    case 'system': return renderSystem(m, date);
    case 'tool_result': return renderToolResult(m, date);
    case 'host': return renderHost(m, date);
    case 'trace': return renderTrace(m, date);
    default: return renderUser(m, date);
  }
}

function groupKeyOf(m) {
  if (m.message_type === 'assistant') return `a\u0000${m.routed_to || ''}\u0000${m.chat_jid}`;
  if ((m.message_type || 'user') === 'user' && !isCommand(m)) {
    return `u\u0000${m.sender}\u0000${m.chat_jid}\u0000${m.observed ? 1 : 0}`;
  }
  return null;
}

// ---------------------------------------------------------------- list management

const seqOf = (m) => {
  const n = Number(m.seq);
  return Number.isFinite(n) && m.seq !== null && m.seq !== '' ? n : Number.MAX_SAFE_INTEGER;
};
const cmpRec = (a, b) => (a.seq - b.seq) || (a.order - b.order);

function noteFolder(folder) {
  if (!folder || state.folders.has(folder)) return;
  state.folders.add(folder);
  const select = els.filter;
  const sorted = [...state.folders].sort();
  const option = h('option', { value: folder, text: folder });
  const idx = sorted.indexOf(folder);
  select.insertBefore(option, select.options[idx + 1] || null);
}

/** Add a stored message; returns the record, or null for a duplicate. */
function addMessage(m, live) {
  if (!m || typeof m !== 'object' || m.id == null || !m.chat_jid) return null;
  const key = msgKey(m);
  if (state.byKey.has(key)) return null;
  if (!m.metadata || typeof m.metadata !== 'object') m.metadata = {};
  const date = parseTime(m.timestamp);
  const rec = {
    key,
    msg: m,
    seq: seqOf(m),
    order: state.order++,
    date,
    day: date ? dayKey(date) : '',
    time: date ? date.getTime() : NaN,
    groupKey: groupKeyOf(m),
    folder: '',
    el: null,
  };
  rec.el = renderMessage(m, date);
  if (m.routed_to) {
    noteFolder(m.routed_to);
    if (!state.firstFolder.has(m.chat_jid)) state.firstFolder.set(m.chat_jid, m.routed_to);
  }

  const pend = claimPending(m);
  if (live && !pend) rec.el.classList.add('enter');

  const arr = state.records;
  let lo = arr.length;
  if (arr.length && cmpRec(arr[arr.length - 1], rec) > 0) {
    lo = 0;
    let hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cmpRec(arr[mid], rec) <= 0) lo = mid + 1;
      else hi = mid;
    }
  }
  const next = arr[lo];
  arr.splice(lo, 0, rec);
  els.messages.insertBefore(rec.el, next ? next.el : null);
  state.byKey.set(key, rec);
  if (pend) removePending(pend);

  if (m.message_type === 'assistant') {
    stopTyping(m.chat_jid);
    answered(m.metadata.job_id);
    answeredBy(m.id);
  }
  return rec;
}

function relayout() {
  const used = new Set();
  const dayCount = new Map();
  const running = new Map();
  let prev = null;
  let visibleCount = 0;
  for (const rec of state.records) {
    const m = rec.msg;
    const folder = m.routed_to || running.get(m.chat_jid) || state.firstFolder.get(m.chat_jid) || '';
    if (m.routed_to) running.set(m.chat_jid, m.routed_to);
    rec.folder = folder;
    const visible = !state.filter || folder === state.filter;
    if (rec.el.hidden === visible) rec.el.hidden = !visible;
    if (!visible) continue;
    visibleCount++;
    rec.el.classList.remove('has-next');

    if (rec.day && (!prev || prev.day !== rec.day)) {
      const n = (dayCount.get(rec.day) || 0) + 1;
      dayCount.set(rec.day, n);
      const key = `${rec.day}|${n}`;
      let sep = state.seps.get(key);
      const label = dayLabel(rec.date);
      if (!sep) {
        sep = h('div', { class: 'day-sep', role: 'separator', 'aria-label': label }, h('span', { text: label }));
        state.seps.set(key, sep);
      } else if (sep.textContent !== label) {
        sep.firstChild.textContent = label;
        sep.setAttribute('aria-label', label);
      }
      if (rec.el.previousSibling !== sep) els.messages.insertBefore(sep, rec.el);
      used.add(key);
    }

    const cont = !!prev && !!rec.groupKey && prev.groupKey === rec.groupKey
      && prev.day === rec.day && Math.abs(rec.time - prev.time) < GROUP_WINDOW;
    rec.el.classList.toggle('cont', cont);
    if (cont) prev.el.classList.add('has-next');
    prev = rec;
  }
  for (const [key, sep] of state.seps) {
    if (!used.has(key)) {
      sep.remove();
      state.seps.delete(key);
    }
  }
  els.filterEmpty.hidden = !(state.filter && visibleCount === 0);
  updateEmpty();
}

function updateEmpty() {
  const nothing = state.records.length === 0 && state.pending.size === 0;
  els.empty.hidden = !(nothing && (state.historySeen || (state.everConnected === false && state.attempt > 1)));
}

// ---------------------------------------------------------------- scrolling

function nearBottom() {
  const s = els.scroller;
  return s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM;
}

function scrollToBottom(smooth) {
  const s = els.scroller;
  if (smooth && !matchMedia('(prefers-reduced-motion: reduce)').matches) {
    s.scrollTo({ top: s.scrollHeight, behavior: 'smooth' });
  } else {
    s.scrollTop = s.scrollHeight;
  }
  hidePill();
}

function showPill() {
  els.pill.hidden = false;
}

function hidePill() {
  els.pill.hidden = true;
}

/** Run fn (which adds content) and then keep the view pinned to the bottom if it was. */
function withStick(fn, { force = false, notify = true } = {}) {
  const stick = force || nearBottom();
  const added = fn();
  if (stick) requestAnimationFrame(() => scrollToBottom(false));
  else if (notify && added) showPill();
  return added;
}

// ---------------------------------------------------------------- typing

function stopTyping(jid) {
  const t = state.typing.get(jid);
  if (!t) return;
  clearTimeout(t.timer);
  state.typing.delete(jid);
  renderTyping();
}

function onTyping(frame) {
  const jid = frame.chat_jid;
  if (!jid) return;
  if (!state.operator && state.chatJid && jid !== state.chatJid) return;
  const old = state.typing.get(jid);
  if (old) clearTimeout(old.timer);
  if (frame.active) {
    if (frame.folder) noteFolder(frame.folder);
    state.typing.set(jid, {
      folder: frame.folder || '',
      timer: setTimeout(() => stopTyping(jid), TYPING_TIMEOUT),
    });
  } else {
    state.typing.delete(jid);
  }
  withStick(() => { renderTyping(); return false; });
}

function renderTyping() {
  const streaming = new Set([...state.streams.values()].filter((s) => s.el).map((s) => s.chat));
  const entries = [...state.typing.entries()]
    .filter(([jid, t]) => (!state.filter || t.folder === state.filter) && !streaming.has(jid));
  const text = els.typing.querySelector('.typing-text');
  if (!entries.length) {
    els.typing.hidden = true;
    text.textContent = '';
    return;
  }
  let label = `${state.assistant} is typing…`;
  if (state.operator) {
    if (entries.length === 1) {
      const [jid, t] = entries[0];
      label = `${state.assistant} is typing in ${jid}${t.folder ? ` · ${t.folder}` : ''}…`;
    } else {
      label = `${state.assistant} is typing in ${entries.length} chats…`;
    }
  }
  text.textContent = label;
  els.typing.dataset.chats = entries.map(([jid]) => jid).join(' ');
  els.typing.hidden = false;
}

function clearTyping() {
  for (const t of state.typing.values()) clearTimeout(t.timer);
  state.typing.clear();
  renderTyping();
}

// ---------------------------------------------------------------- answers being written
// With a streaming provider the server sends an answer's text as the model writes it
// (frames of type "stream": never stored). The growing answer is shown below the list and
// removed when the stored answer of the same job arrives, or when the run ends without one.

function onStream(frame) {
  const job = frame.job_id;
  const jid = frame.chat_jid;
  if (job == null || !jid || state.answered.has(job)) return;
  if (!state.operator && state.chatJid && jid !== state.chatJid) return;
  let s = state.streams.get(job);
  if (frame.done) {
    if (!s) return;
    // The stored answer replaces the text; if it never shows here, the text goes anyway.
    if (frame.answer_id == null || state.storedAnswers.has(frame.answer_id)) dropStream(job);
    else {
      s.answerId = frame.answer_id;
      s.timer = setTimeout(() => dropStream(job), ACCEPT_GRACE);
    }
    return;
  }
  const text = String(frame.text || '');
  const offset = Number(frame.offset) || 0;
  if (!s) {
    if (offset !== 0) return; // joined mid-answer: wait for the stored one
    s = { job, chat: jid, folder: frame.folder || '', text: '', points: 0, el: null, timer: null };
    state.streams.set(job, s);
  }
  // Offsets count code points; JavaScript strings count UTF-16 units.
  if (offset === 0) {
    s.text = text;
    s.points = [...text].length;
  } else if (offset === s.points) {
    s.text += text;
    s.points += [...text].length;
  } else {
    return; // a frame was missed: the stored answer will say it all
  }
  withStick(() => { renderStream(s); renderTyping(); return false; });
}

function renderStream(s) {
  let el = null;
  if (s.text) {
    const m = {
      id: `stream-${s.job}`, chat_jid: s.chat, routed_to: s.folder, content: s.text,
      message_type: 'assistant', seq: null, metadata: {},
    };
    el = renderAssistant(m, null);
    el.classList.add('streaming');
    el.dataset.testid = 'streaming';
    el.dataset.job = String(s.job);
    el.setAttribute('aria-busy', 'true');
    el.hidden = !!state.filter && s.folder !== state.filter;
  }
  if (s.el && el) s.el.replaceWith(el);
  else if (s.el) s.el.remove();
  else if (el) els.streams.append(el);
  s.el = el;
}

function dropStream(job) {
  const s = state.streams.get(job);
  if (!s) return;
  clearTimeout(s.timer);
  if (s.el) s.el.remove();
  state.streams.delete(job);
  renderTyping();
}

function answered(job) {
  if (job == null) return;
  dropStream(job);
  state.answered.add(job);
  if (state.answered.size > 500) state.answered.delete(state.answered.values().next().value);
}

// A visitor's copy of the stored answer carries no job id: it is matched by its own id,
// which the stream's last frame names (whichever of the two arrives first).
function answeredBy(id) {
  if (id == null) return;
  state.storedAnswers.add(id);
  if (state.storedAnswers.size > 500) {
    state.storedAnswers.delete(state.storedAnswers.values().next().value);
  }
  for (const s of state.streams.values()) if (s.answerId === id) dropStream(s.job);
}

function clearStreams() {
  for (const job of [...state.streams.keys()]) dropStream(job);
}

// ---------------------------------------------------------------- pending sends

function looksLikeCommand(text) {
  const t = text.trim();
  return /^\S+$/.test(t) && /^[@#/]/.test(t);
}

function renderPending(p) {
  const now = new Date();
  let node;
  if (looksLikeCommand(p.text)) {
    node = h('div', { class: 'msg user out cmd pending' },
      h('div', { class: 'row' }, h('div', { class: 'row-body' },
        h('span', { class: 'chip' },
          h('code', { text: p.text.trim() }),
          h('span', { class: 'chip-time pending-label', text: 'sending…' })))));
  } else {
    const text = h('div', { class: 'text' });
    linkifyInto(text, p.text);
    text.append(h('span', { class: 'stamp' }, h('span', { class: 'pending-label', text: 'sending…' })));
    const previews = (p.previews || []).map((f) => (f.url
      ? h('img', { class: 'pending-image', src: f.url, alt: f.name || 'picture' })
      : h('span', { class: 'attach-name', text: f.name || 'file' })));
    const files = previews.length ? h('div', { class: 'attachments' }, ...previews) : null;
    node = h('div', { class: 'msg user out pending' },
      h('div', { class: 'row' }, h('div', { class: 'row-body' }, h('div', { class: 'bubble' }, files, text))));
  }
  node.dataset.testid = 'pending';
  node.dataset.clientId = p.id;
  node.title = `Sending · ${hhmm(now)}`;
  return node;
}

function setPendingLabel(p, label, cls) {
  const target = p.el.querySelector('.pending-label');
  if (target) target.textContent = label;
  p.el.classList.remove('pending', 'failed', 'sent', 'unrouted');
  if (cls) p.el.classList.add(cls);
}

function markFailed(p, reason) {
  p.failed = true;
  p.inflight = false;
  setPendingLabel(p, 'not sent', 'failed');
  let actions = p.el.querySelector('.msg-actions');
  if (!actions) {
    actions = h('div', { class: 'msg-actions' },
      h('button', { type: 'button', class: 'link-button', dataset: { action: 'retry' }, text: 'Retry' }),
      h('button', { type: 'button', class: 'link-button', dataset: { action: 'edit' }, text: 'Edit' }),
      h('button', { type: 'button', class: 'link-button', dataset: { action: 'discard' }, text: 'Discard' }));
    p.el.querySelector('.row-body').append(actions);
  }
  if (reason) p.el.title = reason;
}

function removePending(p) {
  clearTimeout(p.timer);
  state.pending.delete(p.id);
  if (p.storedId != null) state.storedToClient.delete(String(p.storedId));
  p.el.remove();
  updateEmpty();
}

/** The stored message that replaces a local echo, if this is one. */
function claimPending(m) {
  if (!state.pending.size) return null;
  const cid = state.storedToClient.get(String(m.id));
  if (cid && (!state.chatJid || m.chat_jid === state.chatJid)) {
    const p = state.pending.get(cid);
    if (p) return p;
  }
  if ((m.message_type || 'user') !== 'user' || !isOwn(m)) return null;
  const content = String(m.content || '').trim();
  for (const p of state.pending.values()) {
    if (p.storedId == null && p.text.trim() === content) return p;
  }
  return null;
}

function transmit(p) {
  const ws = state.ws;
  if (!ws || !state.open) return false;
  try {
    const frame = { type: 'send', client_id: p.id, text: p.text };
    if (p.attachments && p.attachments.length) frame.attachments = p.attachments;
    ws.send(JSON.stringify(frame));
  } catch {
    return false;
  }
  p.inflight = true;
  p.failed = false;
  return true;
}

async function send() {
  const text = els.composer.value;
  const picker = state.picker;
  const withFiles = !!picker && picker.count() > 0;
  if ((!text.trim() && !withFiles) || !state.open) return;
  const bytes = utf8Length(text);
  if (bytes > CONTENT_LIMIT) {
    showError(`This message is too long: ${fmtInt(bytes)} bytes, the limit is ${fmtInt(CONTENT_LIMIT)}.`);
    return;
  }
  const p = { id: `c${++state.clientSeq}`, text, storedId: null, el: null, timer: null, inflight: false, failed: false };
  if (withFiles) {
    try {
      p.attachments = await picker.files();
    } catch {
      showError('A file could not be read; remove it and try again.');
      return;
    }
    p.previews = picker.previews();
  }
  p.el = renderPending(p);
  if (!transmit(p)) {
    showError('Not connected. Your message was kept; it can be sent once the connection is back.');
    return;
  }
  hideError();
  state.pending.set(p.id, p);
  els.outbox.append(p.el);
  if (withFiles) picker.clear();
  els.composer.value = '';
  onComposerInput();
  updateEmpty();
  requestAnimationFrame(() => scrollToBottom(false));
}

function resend(p) {
  if (!state.open) {
    showError('Still offline — try again once the connection is back.');
    return;
  }
  const old = p.id;
  state.pending.delete(old);
  p.id = `c${++state.clientSeq}`;
  p.el.dataset.clientId = p.id;
  const actions = p.el.querySelector('.msg-actions');
  if (actions) actions.remove();
  state.pending.set(p.id, p);
  setPendingLabel(p, 'sending…', 'pending');
  if (!transmit(p)) markFailed(p);
}

function onAccepted(frame) {
  const p = state.pending.get(frame.client_id);
  hideError();
  if (!p) return;
  p.inflight = false;
  const decision = frame.decision || {};
  if (frame.id != null) {
    p.storedId = String(frame.id);
    state.storedToClient.set(p.storedId, p.id);
    if (state.chatJid && state.byKey.has(`${state.chatJid}\u0000${p.storedId}`)) {
      removePending(p);
      return;
    }
  }
  if (decision.action === 'ignore' && decision.layer === 'miss') {
    setPendingLabel(p, 'not routed', 'unrouted');
    p.el.title = decision.reason || 'No route matched this message.';
    return;
  }
  clearTimeout(p.timer);
  p.timer = setTimeout(() => {
    if (state.pending.get(p.id) === p) setPendingLabel(p, hhmm(new Date()), 'sent');
  }, ACCEPT_GRACE);
}

function onError(frame) {
  const message = String(frame.error || 'Something went wrong.');
  const p = frame.client_id != null ? state.pending.get(frame.client_id) : null;
  if (p) {
    if (!els.composer.value.trim()) {
      removePending(p);
      els.composer.value = p.text;
      onComposerInput();
      els.composer.focus();
      const end = els.composer.value.length;
      els.composer.setSelectionRange(end, end);
    } else {
      markFailed(p, message);
    }
  }
  showError(message);
}

// ---------------------------------------------------------------- composer

function showError(text) {
  els.errorText.textContent = text;
  els.error.hidden = false;
  updateComposerMetrics();
}

function hideError() {
  if (els.error.hidden) return;
  els.error.hidden = true;
  els.errorText.textContent = '';
  updateComposerMetrics();
}

function autosize() {
  const ta = els.composer;
  ta.style.height = 'auto';
  const cs = getComputedStyle(ta);
  const line = parseFloat(cs.lineHeight) || 22;
  const extra = parseFloat(cs.paddingTop) + parseFloat(cs.paddingBottom);
  const max = line * COMPOSER_MAX_LINES + extra;
  const next = Math.min(ta.scrollHeight, max);
  ta.style.height = `${next}px`;
  ta.style.overflowY = ta.scrollHeight > max ? 'auto' : 'hidden';
}

function onComposerInput() {
  const text = els.composer.value;
  let over = false;
  if (text.length * 3 >= COUNTER_FROM) {
    const bytes = utf8Length(text);
    over = bytes > CONTENT_LIMIT;
    if (bytes >= COUNTER_FROM) {
      els.counter.hidden = false;
      els.counter.textContent = over
        ? `${fmtInt(bytes)} / ${fmtInt(CONTENT_LIMIT)} — too long`
        : `${fmtInt(bytes)} / ${fmtInt(CONTENT_LIMIT)}`;
      els.counter.title = 'Size in bytes (UTF-8)';
      els.counter.classList.toggle('over', over);
      els.counter.classList.toggle('near', !over);
    } else {
      els.counter.hidden = true;
    }
  } else if (!els.counter.hidden) {
    els.counter.hidden = true;
  }
  const files = state.picker ? state.picker.count() : 0;
  els.send.disabled = !state.open || (!text.trim() && !files) || over;
  autosize();
  updateComposerMetrics();
}

function updateComposerMetrics() {
  const stick = nearBottom();
  document.documentElement.style.setProperty('--composer-h', `${els.footer.offsetHeight}px`);
  if (stick) els.scroller.scrollTop = els.scroller.scrollHeight;
}

function fillComposer(text) {
  els.composer.value = text;
  onComposerInput();
  els.composer.focus();
  els.composer.setSelectionRange(text.length, text.length);
}

// ---------------------------------------------------------------- status

function setStatus(stateName) {
  const status = els.status;
  status.dataset.state = stateName;
  let text = 'online';
  if (stateName === 'connecting') text = state.everConnected ? 'reconnecting…' : 'connecting…';
  if (stateName === 'offline') text = state.closeReason ? `offline — ${state.closeReason}` : 'offline — retrying';
  status.querySelector('.status-text').textContent = text;
  els.retry.hidden = stateName !== 'offline';
  els.composer.placeholder = stateName === 'offline'
    ? 'Offline — you can write; sending resumes when reconnected'
    : `Message ${state.assistant}`;
  onComposerInput();
}

// ---------------------------------------------------------------- hello / operator

function onHello(frame) {
  state.helloSeen = true;
  state.chatJid = frame.chat_jid || null;
  state.sender = frame.sender || null;
  if (frame.assistant) state.assistant = String(frame.assistant);
  if (frame.channel) state.channel = String(frame.channel);
  const operator = frame.operator === true;
  if (operator !== state.operator) {
    state.operator = operator;
    setupOperator();
  }
  els.name.textContent = state.assistant;
  els.channel.textContent = `#${state.channel}`;
  els.brand.textContent = initialOf(state.assistant);
  els.typing.querySelector('.avatar').textContent = initialOf(state.assistant);
  for (const node of document.querySelectorAll('.empty-name')) node.textContent = state.assistant;
  document.title = titleText();
  setStatus(state.open ? 'online' : els.status.dataset.state);
}

function setupOperator() {
  document.body.classList.toggle('is-operator', state.operator);
  const existing = document.getElementById('operator');
  if (state.operator && !existing) {
    const badge = h('span', { id: 'operator', class: 'operator-badge', title: 'You see every chat live' },
      shieldIcon(), 'Operator view');
    els.operatorTools.prepend(badge);
  } else if (!state.operator && existing) {
    existing.remove();
  }
  els.operatorTools.hidden = !state.operator;
  if (!state.operator) {
    state.filter = '';
    els.filter.value = '';
  }
}

function shieldIcon() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 16 16');
  svg.setAttribute('width', '12');
  svg.setAttribute('height', '12');
  svg.setAttribute('aria-hidden', 'true');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', 'M8 1.2 2.5 3.3v4.1c0 3.3 2.3 6.2 5.5 7.4 3.2-1.2 5.5-4.1 5.5-7.4V3.3L8 1.2z');
  path.setAttribute('fill', 'currentColor');
  svg.append(path);
  return svg;
}

function titleText() {
  const base = `${state.assistant} · #${state.channel}`;
  return state.unread ? `(${state.unread}) ${base}` : base;
}

// ---------------------------------------------------------------- frames

function onHistory(frame) {
  const list = Array.isArray(frame.messages) ? frame.messages.slice() : [];
  list.sort((a, b) => seqOf(a) - seqOf(b));
  const first = !state.historySeen;
  els.messages.setAttribute('aria-busy', 'true');
  let added = 0;
  withStick(() => {
    for (const m of list) if (addMessage(m, false)) added++;
    relayout();
    // A send whose fate the lost connection hid, and that the history does not show.
    for (const p of state.pending.values()) {
      if (p.inflight && p.storedId == null) markFailed(p, 'The connection dropped before the server confirmed this message.');
    }
    return added > 0;
  }, { force: first, notify: !first });
  state.historySeen = true;
  updateEmpty();
  requestAnimationFrame(() => els.messages.setAttribute('aria-busy', 'false'));
}

function onLiveMessage(m) {
  let rec = null;
  const own = !!m && isOwn(m);
  withStick(() => {
    rec = addMessage(m, true);
    if (rec) relayout();
    return !!rec && !rec.el.hidden;
  }, { force: own });
  if (rec && document.hidden && !own && ['assistant', 'user', 'host'].includes(m.message_type || 'user')) {
    state.unread++;
    document.title = titleText();
  }
}

function onFrame(frame) {
  if (!frame || typeof frame !== 'object') return;
  switch (frame.type) {
    case 'hello': onHello(frame); break;
    case 'history': onHistory(frame); break;
    case 'message': onLiveMessage(frame.message); break;
    case 'typing': onTyping(frame); break;
    case 'stream': onStream(frame); break;
    case 'accepted': onAccepted(frame); break;
    case 'error': onError(frame); break;
    case 'pong': break;
    default: break;
  }
}

// ---------------------------------------------------------------- connection

function socketUrl() {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  let url = `${scheme}//${location.host}/ws/chat/${encodeURIComponent(state.channel)}`;
  return url;
}

function connect() {
  clearTimeout(state.retryTimer);
  state.retryTimer = null;
  if (state.ws) return;
  setStatus('connecting');
  let ws;
  try {
    ws = new WebSocket(socketUrl());
  } catch {
    scheduleReconnect();
    return;
  }
  state.ws = ws;
  ws.addEventListener('open', () => {
    if (state.ws !== ws) return;
    state.open = true;
    state.closeReason = '';
    state.everConnected = true;
    state.attempt = 0;
    state.lastFrameAt = Date.now();
    startPing();
    setStatus('online');
  });
  ws.addEventListener('message', (event) => {
    if (state.ws !== ws) return;
    state.lastFrameAt = Date.now();
    if (typeof event.data !== 'string') return;
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      return;
    }
    try {
      onFrame(frame);
    } catch (err) {
      console.error('postroom: could not handle a frame', err, frame);
    }
  });
  ws.addEventListener('close', (event) => {
    state.closeReason = CLOSE_REASONS[event.code] || '';
    if (state.closeReason) state.attempt = Math.max(state.attempt, 4);
    dropSocket(ws);
  });
  ws.addEventListener('error', () => { /* a close event follows */ });
}

function dropSocket(ws) {
  if (state.ws !== ws) return;
  state.ws = null;
  state.open = false;
  stopPing();
  clearTyping();
  clearStreams(); // frames sent while away are lost: the stored answers will come
  try { ws.close(); } catch { /* already closed */ }
  scheduleReconnect();
}

function scheduleReconnect() {
  clearTimeout(state.retryTimer);
  const delay = Math.min(1000 * 2 ** state.attempt, BACKOFF_MAX);
  state.attempt = Math.min(state.attempt + 1, 10);
  setStatus('offline');
  updateEmpty();
  state.retryTimer = setTimeout(connect, delay);
}

function reconnectNow() {
  if (state.ws) return;
  state.attempt = 0;
  connect();
}

function startPing() {
  stopPing();
  state.pingTimer = setInterval(() => {
    const ws = state.ws;
    if (!ws || !state.open) return;
    if (Date.now() - state.lastFrameAt > DEAD_AFTER) {
      dropSocket(ws);
      return;
    }
    try {
      ws.send(JSON.stringify({ type: 'ping' }));
    } catch {
      dropSocket(ws);
    }
  }, PING_EVERY);
}

function stopPing() {
  clearInterval(state.pingTimer);
  state.pingTimer = null;
}

// ---------------------------------------------------------------- clipboard

async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch { /* fall back below */ }
  const ta = h('textarea', { readonly: true, 'aria-hidden': 'true' });
  ta.value = text;
  ta.style.position = 'fixed';
  ta.style.top = '-1000px';
  ta.style.opacity = '0';
  document.body.append(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

// ---------------------------------------------------------------- wiring

function bind() {
  els.scroller = $('#scroller');
  els.messages = $('#messages');
  els.outbox = $('#outbox');
  els.streams = $('#streams');
  els.empty = $('#empty');
  els.typing = $('#typing');
  els.composer = $('#composer');
  els.form = $('#composer-form');
  els.send = $('#send');
  els.counter = $('#counter');
  els.error = $('#composer-error');
  els.errorText = els.error.querySelector('.composer-error-text');
  els.status = $('#status');
  els.retry = $('#retry-now');
  els.pill = $('#new-pill');
  els.name = $('#assistant-name');
  els.channel = $('#channel-label');
  els.brand = $('#brand-avatar');
  els.operatorTools = $('#operator-tools');
  els.filter = $('#folder-filter');
  els.footer = document.querySelector('.composer-area');

  state.picker = filePicker({
    form: els.form,
    composer: els.composer,
    dropZone: $('#app'),
    onChange: onComposerInput,
    onError: showError,
  });

  els.filterEmpty = h('p', { class: 'filter-empty', hidden: true, text: 'Nothing in this folder yet.' });
  els.messages.after(els.filterEmpty);

  els.channel.textContent = `#${state.channel}`;
  document.title = titleText();

  els.form.addEventListener('submit', (event) => {
    event.preventDefault();
    send();
    els.composer.focus();
  });

  els.composer.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.altKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      send();
    } else if (event.key === 'Escape' && !els.error.hidden) {
      hideError();
    }
  });
  els.composer.addEventListener('input', onComposerInput);

  els.error.querySelector('.dismiss').addEventListener('click', () => {
    hideError();
    els.composer.focus();
  });

  for (const hint of document.querySelectorAll('.hint[data-fill]')) {
    hint.addEventListener('click', () => fillComposer(hint.dataset.fill));
  }

  els.retry.addEventListener('click', reconnectNow);

  els.pill.addEventListener('click', () => {
    scrollToBottom(true);
    els.composer.focus({ preventScroll: true });
  });

  let scrollQueued = false;
  els.scroller.addEventListener('scroll', () => {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      if (nearBottom()) hidePill();
    });
  }, { passive: true });

  els.filter.addEventListener('change', () => {
    state.filter = els.filter.value;
    relayout();
    for (const s of state.streams.values()) renderStream(s);
    renderTyping();
    scrollToBottom(false);
  });

  // Delegated actions inside the message list and the outbox.
  const onListClick = async (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (!target) return;
    const copy = target.closest('.copy');
    if (copy) {
      const code = copy.closest('.codeblock')?.querySelector('pre code');
      const ok = code ? await copyText(code.textContent) : false;
      const label = copy.querySelector('.copy-label');
      copy.classList.toggle('done', ok);
      label.textContent = ok ? 'Copied' : 'Copy failed';
      copy.focus({ preventScroll: true });
      setTimeout(() => {
        label.textContent = 'Copy';
        copy.classList.remove('done');
      }, 1600);
      return;
    }
    const more = target.closest('.more');
    if (more) {
      const line = more.closest('.system-line');
      const expanded = line.classList.toggle('clamped') === false;
      more.textContent = expanded ? 'Show less' : 'Show more';
      more.setAttribute('aria-expanded', String(expanded));
      return;
    }
    const quote = target.closest('.reply-quote');
    if (quote) {
      const rec = state.byKey.get(quote.dataset.target);
      if (rec && !rec.el.hidden) {
        rec.el.scrollIntoView({ block: 'center', behavior: 'smooth' });
        rec.el.classList.remove('flash');
        void rec.el.offsetWidth;
        rec.el.classList.add('flash');
      }
      return;
    }
    const action = target.closest('[data-action]');
    if (action) {
      const msg = action.closest('[data-client-id]');
      const p = msg && state.pending.get(msg.dataset.clientId);
      if (!p) return;
      if (action.dataset.action === 'retry') resend(p);
      else if (action.dataset.action === 'edit') {
        removePending(p);
        fillComposer(p.text);
      } else if (action.dataset.action === 'discard') {
        removePending(p);
        els.composer.focus();
      }
    }
  };
  els.messages.addEventListener('click', onListClick);
  els.outbox.addEventListener('click', onListClick);

  window.addEventListener('online', reconnectNow);
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) return;
    if (state.unread) {
      state.unread = 0;
      document.title = titleText();
    }
    if (!state.ws) reconnectNow();
    relayout(); // "Today" may have become "Yesterday"
  });

  if (typeof ResizeObserver === 'function') {
    new ResizeObserver(() => updateComposerMetrics()).observe(els.footer);
  }
  window.addEventListener('resize', () => {
    if (nearBottom()) scrollToBottom(false);
  });

  onComposerInput();
  if (matchMedia('(pointer: fine)').matches) els.composer.focus({ preventScroll: true });
}

function start() {
  bind();
  connect();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
