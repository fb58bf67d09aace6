/* Markdown of answers, shared by the web chat and the dashboard's conversation view. */

import { h, safeHref, linkEl } from './dom.js';

// ---------------------------------------------------------------- Markdown
// Parsed by markdown-it (vendored in /static/vendor/), configured as the server configures
// markdown-it-py for the chat platforms, so an answer has one structure everywhere. The page
// builds elements from its tokens: text is only ever a text node (raw HTML in an answer stays
// text), only known tags are made, and links go only to http(s) and mailto.

let parser;

/** The parser, made on first use (the vendored script defines window.markdownit). */
function markdownParser() {
  if (parser === undefined) {
    parser = typeof window.markdownit === 'function'
      ? window.markdownit({ html: false, linkify: true, breaks: true, typographer: false })
      : null;
  }
  return parser;
}

const BLOCK_TAGS = new Set(['p', 'ul', 'ol', 'li', 'blockquote', 'table', 'thead', 'tbody',
  'tr', 'th', 'td']);
const SPAN_TAGS = new Set(['strong', 'em', 's']);

/** The element a block token opens, or null for a tag the page does not make. */
function blockElement(token) {
  const tag = token.tag;
  const heading = /^h([1-6])$/.exec(tag);
  if (heading) {
    const level = Number(heading[1]);
    return h(`h${Math.min(6, level + 2)}`, { class: `md-h${level}` });
  }
  if (!BLOCK_TAGS.has(tag)) return null;
  const el = h(tag, tag === 'th' ? { scope: 'col' } : null);
  const start = tag === 'ol' ? token.attrGet('start') : null; // set only when not 1
  if (start !== null && Number.isInteger(Number(start))) el.setAttribute('start', start);
  const align = /text-align:(left|right|center)/.exec(token.attrGet('style') || '');
  if (align) el.style.textAlign = align[1]; // CSSOM: allowed under a strict CSP
  return el;
}

function buildBlocks(tokens, root) {
  const stack = [root];
  for (const token of tokens) {
    const top = stack[stack.length - 1];
    if (token.nesting === 1) {
      // A tight list's paragraphs are hidden: their text goes straight into the item.
      const el = token.hidden ? null : blockElement(token);
      if (el) top.append(el);
      stack.push(el || top);
    } else if (token.nesting === -1) {
      if (stack.length > 1) stack.pop();
    } else if (token.type === 'inline') {
      buildInline(token.children || [], top);
    } else if (token.type === 'fence' || token.type === 'code_block') {
      top.append(codeBlock(token.content.replace(/\n$/, ''), token.info.trim().split(/\s+/)[0]));
    } else if (token.type === 'hr') {
      top.append(h('hr'));
    } else if (token.content) {
      top.append(document.createTextNode(token.content));
    }
  }
}

function buildInline(tokens, parent) {
  // Each open element, with the URL of a link the page will not open (else null).
  const stack = [{ el: parent, unsafe: null }];
  for (const token of tokens) {
    const top = stack[stack.length - 1].el;
    if (token.type === 'link_open') {
      const raw = token.attrGet('href') || '';
      const href = safeHref(raw);
      const el = href ? linkEl(href) : h('span', { class: 'unsafe-link' });
      top.append(el);
      stack.push({ el, unsafe: href ? null : raw });
    } else if (token.nesting === 1) {
      const el = SPAN_TAGS.has(token.tag) ? h(token.tag === 's' ? 'del' : token.tag) : h('span');
      top.append(el);
      stack.push({ el, unsafe: null });
    } else if (token.nesting === -1) {
      const closed = stack.length > 1 ? stack.pop() : null;
      if (closed && closed.unsafe !== null) {
        // A link the page will not open reads "label (url)", as on the chat platforms.
        const label = closed.el.textContent;
        if (!label) closed.el.textContent = closed.unsafe;
        else if (label !== closed.unsafe) closed.el.append(` (${closed.unsafe})`);
      }
    } else if (token.type === 'softbreak' || token.type === 'hardbreak') {
      top.append(h('br'));
    } else if (token.type === 'code_inline') {
      top.append(h('code', { text: token.content }));
    } else if (token.type === 'image') {
      const raw = token.attrGet('src') || '';
      const href = safeHref(raw);
      const alt = token.content || raw;
      top.append(href ? linkEl(href, alt) : document.createTextNode(`${alt} (${raw})`));
    } else if (token.content) {
      top.append(document.createTextNode(token.content));
    }
  }
}

function codeBlock(code, lang) {
  const codeEl = h('code', { text: code });
  const label = lang ? lang.replace(/[^\w+#.-]/g, '').slice(0, 24) : '';
  return h('div', { class: 'codeblock' },
    h('div', { class: 'codeblock-head' },
      h('span', { class: 'codeblock-lang', text: label || 'code' }),
      h('button', { type: 'button', class: 'copy', 'aria-label': 'Copy code to clipboard' },
        copyIcon(), h('span', { class: 'copy-label', text: 'Copy' }))),
    h('pre', { tabindex: '0' }, codeEl));
}

function copyIcon() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 16 16');
  svg.setAttribute('width', '13');
  svg.setAttribute('height', '13');
  svg.setAttribute('aria-hidden', 'true');
  const a = document.createElementNS(ns, 'rect');
  for (const [k, v] of Object.entries({ x: 5.5, y: 5.5, width: 8, height: 8, rx: 1.8 })) a.setAttribute(k, v);
  const b = document.createElementNS(ns, 'path');
  b.setAttribute('d', 'M10.5 3.5v-.2c0-1-.8-1.8-1.8-1.8H4.3c-1 0-1.8.8-1.8 1.8v4.4c0 1 .8 1.8 1.8 1.8h.2');
  for (const el of [a, b]) {
    el.setAttribute('fill', 'none');
    el.setAttribute('stroke', 'currentColor');
    el.setAttribute('stroke-width', '1.4');
    svg.append(el);
  }
  return svg;
}

function renderMarkdown(text) {
  const root = h('div', { class: 'md' });
  const source = String(text || '');
  const markdown = markdownParser();
  if (!markdown) {
    root.append(h('p', { class: 'plain', text: source })); // the parser did not load
    return root;
  }
  buildBlocks(markdown.parse(source, {}), root);
  return root;
}

export { renderMarkdown };
