/* Postroom web chat: pictures and files (MESSAGES §4). Kept apart from chat.js, which uses
 * the two things this module exports:
 *
 *   picker({...})  the composer's side: a button, paste and drag and drop add files; each is
 *                  previewed (a thumbnail for a picture) and can be removed before sending;
 *                  files() gives them as the socket's send frame carries them
 *                  ({name, mime, data: base64}).
 *   render(m, channel) the conversation's side: the attachments of a stored message, pictures
 *                  shown, other files named. Their bytes come from GET /api/v1/blobs/<sha256>
 *                  with the page's cookie (the operator's signed-in session, or the visitor's
 *                  own), read with fetch and shown through a blob: URL — no token in the page.
 *
 * As in chat.js, nothing from the server or a file name is ever put into the page as markup.
 */

const MAX_FILES = 8;
// What one message may carry in all: its frame must stay under the socket's 16 MiB.
const MAX_TOTAL = 11 * 1024 * 1024;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text != null) node.textContent = text;
  return node;
}

function sizeText(n) {
  if (n >= 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(1)} MB`;
  if (n >= 1024) return `${Math.round(n / 1024)} KB`;
  return `${n} bytes`;
}

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result || '');
      resolve(url.slice(url.indexOf(',') + 1));
    };
    reader.onerror = () => reject(reader.error || new Error('unreadable'));
    reader.readAsDataURL(file);
  });
}

// ---------------------------------------------------------------- the composer's side

function picker({ form, composer, dropZone, onChange, onError }) {
  const chosen = [];   // {file, url}
  const input = el('input');
  input.type = 'file';
  input.multiple = true;
  input.hidden = true;
  input.dataset.testid = 'file-input';
  const button = el('button', 'attach');
  button.type = 'button';
  button.setAttribute('aria-label', 'Attach pictures or files');
  button.title = 'Attach pictures or files (or paste, or drop them here)';
  button.textContent = '📎';
  const strip = el('div', 'attach-previews');
  strip.dataset.testid = 'attach-previews';
  strip.hidden = true;
  form.prepend(button, input);
  form.before(strip);

  function add(files) {
    for (const file of files) {
      if (chosen.length >= MAX_FILES) {
        onError(`Send at most ${MAX_FILES} files with one message.`);
        break;
      }
      const total = chosen.reduce((n, c) => n + c.file.size, 0) + file.size;
      if (total > MAX_TOTAL) {
        onError(`${file.name || 'This file'} is too large to send here: one message may carry ${sizeText(MAX_TOTAL)}.`);
        continue;
      }
      const url = IMAGE_TYPES.has(file.type) ? URL.createObjectURL(file) : null;
      chosen.push({ file, url });
    }
    draw();
  }

  function remove(index) {
    const [gone] = chosen.splice(index, 1);
    if (gone && gone.url) URL.revokeObjectURL(gone.url);
    draw();
  }

  function draw() {
    strip.replaceChildren();
    chosen.forEach((c, index) => {
      const item = el('div', 'attach-preview');
      item.dataset.testid = 'attach-preview';
      if (c.url) {
        const img = el('img');
        img.src = c.url;
        img.alt = c.file.name || 'picture';
        item.append(img);
      } else {
        item.append(el('span', 'attach-file-icon', '📄'));
      }
      item.append(el('span', 'attach-name', c.file.name || 'pasted file'));
      const drop = el('button', 'attach-remove', '×');
      drop.type = 'button';
      drop.setAttribute('aria-label', `Remove ${c.file.name || 'this file'}`);
      drop.addEventListener('click', () => remove(index));
      item.append(drop);
      strip.append(item);
    });
    strip.hidden = chosen.length === 0;
    onChange();
  }

  button.addEventListener('click', () => input.click());
  input.addEventListener('change', () => {
    add(Array.from(input.files || []));
    input.value = '';
  });
  composer.addEventListener('paste', (event) => {
    const files = Array.from((event.clipboardData && event.clipboardData.files) || []);
    if (files.length) {
      event.preventDefault();
      add(files);
    }
  });
  dropZone.addEventListener('dragover', (event) => {
    if (event.dataTransfer && Array.from(event.dataTransfer.types || []).includes('Files')) {
      event.preventDefault();
      dropZone.classList.add('dropping');
    }
  });
  dropZone.addEventListener('dragleave', (event) => {
    if (event.target === dropZone || !dropZone.contains(event.relatedTarget)) dropZone.classList.remove('dropping');
  });
  dropZone.addEventListener('drop', (event) => {
    dropZone.classList.remove('dropping');
    const files = Array.from((event.dataTransfer && event.dataTransfer.files) || []);
    if (files.length) {
      event.preventDefault();
      add(files);
    }
  });

  return {
    count: () => chosen.length,
    /** Previews of what is about to go, for the message shown while it is sent. */
    previews: () => chosen.map((c) => ({ name: c.file.name, url: c.url })),
    /** The files as the send frame carries them. */
    async files() {
      const out = [];
      for (const c of chosen) {
        out.push({ name: c.file.name || '', mime: c.file.type || 'application/octet-stream', data: await readBase64(c.file) });
      }
      return out;
    },
    /** Forget the files (their previews' URLs go with the message shown while it is sent). */
    clear() {
      chosen.splice(0, chosen.length);
      draw();
    },
  };
}

// ---------------------------------------------------------------- the conversation's side

// The channel tells the server which of the visitor's chats (one per channel) the file must
// belong to; the operator's session sees every chat's files.
function blobUrl(sha, channel) {
  return `/api/v1/blobs/${encodeURIComponent(sha)}?channel=${encodeURIComponent(channel || 'main')}`;
}

async function loadInto(img, sha, channel) {
  try {
    const response = await fetch(blobUrl(sha, channel), { credentials: 'same-origin' });
    if (!response.ok) throw new Error(String(response.status));
    img.src = URL.createObjectURL(await response.blob());
    img.closest('.attachment')?.classList.remove('loading');
  } catch {
    img.closest('.attachment')?.classList.add('unavailable');
  }
}

/** The attachments of stored message *m*, or null when it has none. */
function render(m, channel) {
  const list = m && m.metadata && Array.isArray(m.metadata.attachments) ? m.metadata.attachments : [];
  const shown = list.filter((a) => a && typeof a === 'object' && a.kind !== 'voice' && a.kind !== 'audio');
  if (!shown.length) return null;
  const box = el('div', 'attachments');
  for (const a of shown) {
    const mime = String(a.mime || '');
    const name = String(a.name || '');
    const sha = typeof a.sha256 === 'string' && /^[0-9a-f]{64}$/.test(a.sha256) ? a.sha256 : '';
    if (sha && IMAGE_TYPES.has(mime)) {
      const item = el('figure', 'attachment image loading');
      item.dataset.testid = 'attachment-image';
      const img = el('img');
      img.alt = name || 'picture';
      img.loading = 'lazy';
      item.append(img);
      box.append(item);
      loadInto(img, sha, channel);
    } else {
      const item = el('div', 'attachment file');
      item.dataset.testid = 'attachment-file';
      item.append(el('span', 'attach-file-icon', '📄'), el('span', 'attach-name', name || mime || 'file'));
      if (a.size) item.append(el('span', 'attach-size', sizeText(Number(a.size) || 0)));
      box.append(item);
    }
  }
  return box;
}

export { picker, render };
