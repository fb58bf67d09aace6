/* The dashboard's one script (an ES module, no build step): answers' Markdown rendered with the
 * web chat's own module, also for messages that arrive live; htmx does the rest. */

import { renderMarkdown } from '/static/js/markdown.js';

function renderPending(root) {
  for (const el of root.querySelectorAll('[data-markdown]:not([data-rendered])')) {
    const source = el.textContent;
    el.replaceChildren(renderMarkdown(source));
    el.dataset.rendered = '';
  }
}

function onLive(event) {
  renderPending(document);
  const target = event && event.detail && event.detail.elt;
  if (target && target.id === 'messages') {
    document.getElementById('no-messages')?.remove();
    const last = target.lastElementChild;
    if (last && window.innerHeight + window.scrollY >= document.body.scrollHeight - 400) {
      last.scrollIntoView({ block: 'end' });
    }
  }
}

function start() {
  renderPending(document);
  document.body.addEventListener('htmx:afterSwap', onLive);
  document.body.addEventListener('htmx:sseMessage', onLive);
  const messages = document.getElementById('messages');
  if (messages && messages.lastElementChild) messages.lastElementChild.scrollIntoView({ block: 'end' });
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
