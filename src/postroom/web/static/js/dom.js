/* Small DOM, time and link helpers shared by the web chat and the dashboard. Text from the
 * server only ever becomes text nodes. */

// ---------------------------------------------------------------- DOM helpers

const $ = (sel) => document.querySelector(sel);

/** Create an element. props: class, text, dataset, on<event>, or attributes. */
function h(tag, props, ...children) {
  const node = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value == null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = String(value);
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else if (key.startsWith('on') && typeof value === 'function') {
        node.addEventListener(key.slice(2), value);
      } else node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const pad2 = (n) => String(n).padStart(2, '0');
const fmtInt = (n) => n.toLocaleString('en-US');
const encoder = new TextEncoder();
const utf8Length = (s) => encoder.encode(s).length;

function initialOf(name) {
  const ch = Array.from(String(name || '?').trim())[0] || '?';
  return ch.toUpperCase();
}

function hueOf(text) {
  let hash = 0;
  for (let i = 0; i < text.length; i++) hash = (hash * 31 + text.charCodeAt(i)) | 0;
  return Math.abs(hash) % 360;
}

// ---------------------------------------------------------------- time

function parseTime(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? null : d;
}

const hhmm = (d) => `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
const dayKey = (d) => `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()}`;

function dayLabel(d) {
  const today = new Date();
  const yesterday = new Date(today.getFullYear(), today.getMonth(), today.getDate() - 1);
  if (dayKey(d) === dayKey(today)) return 'Today';
  if (dayKey(d) === dayKey(yesterday)) return 'Yesterday';
  const opts = { weekday: 'long', day: 'numeric', month: 'long' };
  if (d.getFullYear() !== today.getFullYear()) opts.year = 'numeric';
  return d.toLocaleDateString(undefined, opts);
}

function timeEl(d, cls) {
  if (!d) return null;
  return h('time', {
    class: cls || null,
    datetime: d.toISOString(),
    title: d.toLocaleString(undefined, { dateStyle: 'full', timeStyle: 'short' }),
  }, hhmm(d));
}

// ---------------------------------------------------------------- safe links

function safeHref(raw) {
  let text = String(raw || '').trim();
  if (/^www\./i.test(text)) text = `https://${text}`;
  let url;
  try {
    url = new URL(text); // relative URLs throw: only absolute ones are accepted
  } catch {
    return null;
  }
  if (!['http:', 'https:', 'mailto:'].includes(url.protocol)) return null;
  return url.href;
}

function linkEl(href, ...children) {
  return h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, ...children);
}

const AUTOLINK_RE = /^(?:https?:\/\/|mailto:|www\.)[^\s<>"'`]+/i;

/** Trim punctuation that ends a sentence rather than a URL. */
function trimUrl(url) {
  let out = url.replace(/[.,;:!?*_~]+$/, '');
  while (out.endsWith(')')) {
    const open = (out.match(/\(/g) || []).length;
    const close = (out.match(/\)/g) || []).length;
    if (close <= open) break;
    out = out.slice(0, -1).replace(/[.,;:!?*_~]+$/, '');
  }
  return out;
}

const isWordChar = (ch) => !!ch && /[\p{L}\p{N}]/u.test(ch);

/** Plain text with URLs turned into safe links (for user messages). */
function linkifyInto(parent, text) {
  let buf = '';
  let i = 0;
  const flush = () => {
    if (buf) parent.append(document.createTextNode(buf));
    buf = '';
  };
  while (i < text.length) {
    const ch = text[i];
    if ((ch === 'h' || ch === 'H' || ch === 'm' || ch === 'M' || ch === 'w' || ch === 'W')
        && !isWordChar(text[i - 1])) {
      const m = AUTOLINK_RE.exec(text.slice(i, i + 2048));
      if (m) {
        const url = trimUrl(m[0]);
        const href = safeHref(url);
        if (href && url.length > 4) {
          flush();
          parent.append(linkEl(href, url));
          i += url.length;
          continue;
        }
      }
    }
    buf += ch;
    i++;
  }
  flush();
}

export {
  $,
  h,
  pad2,
  fmtInt,
  encoder,
  utf8Length,
  initialOf,
  hueOf,
  parseTime,
  hhmm,
  dayKey,
  dayLabel,
  timeEl,
  safeHref,
  linkEl,
  AUTOLINK_RE,
  trimUrl,
  isWordChar,
  linkifyInto,
};
