// orderflow browser page: dev sign-in, order splits with a live task view,
// task history and payments. Plain JS, no dependencies; talks only to the
// gateway's REST API on this origin.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);

  // ---- configuration -------------------------------------------------

  const params = new URLSearchParams(location.search);
  const intParam = (name, attr, def) => {
    const v = parseInt(params.get(name) ?? document.body.dataset[attr] ?? '', 10);
    return Number.isFinite(v) && v > 0 ? v : def;
  };
  // The seed's polling rule: every 2 s, at most 60 tries.
  const POLL_MS = intParam('pollMs', 'pollMs', 2000);
  const POLL_TRIES = intParam('pollTries', 'pollTries', 60);
  // ?follow=watch follows tasks with the server stream instead of polling.
  const FOLLOW_WATCH = params.get('follow') === 'watch';
  const PAY_POLL_MS = intParam('payPollMs', 'payPollMs', 2000);

  const TOKEN_KEY = 'orderflow.token';
  const MEMBER_KEY = 'orderflow.member';

  // The fulfilment simulator's default catalogue (GET /catalogue on the
  // simulator is another origin, so the page carries a copy for the SKU
  // suggestions) and its documented sample order.
  const CATALOGUE = [
    'SKU-TEA-500G', 'SKU-MUG', 'SKU-KETTLE', 'SKU-LAST-ONE', 'SKU-GIFT-CARD',
    'SKU-RICE-10KG', 'SKU-OIL-5L', 'SKU-PHONE', 'SKU-DESK', 'SKU-SOFA',
  ];
  const SAMPLE_ITEMS = [
    { itemCode: 'A1', sku: 'SKU-TEA-500G', quantity: 2 },
    { itemCode: 'A2', sku: 'SKU-RICE-10KG', quantity: 1 },
    { itemCode: 'A3', sku: 'SKU-KETTLE', quantity: 1 },
    { itemCode: 'A4', sku: 'SKU-NOPE', quantity: 1 },
    { itemCode: 'A5', sku: 'SKU-LAST-ONE', quantity: 3 },
    { itemCode: 'A6', sku: 'SKU-OIL-5L', quantity: 2 },
  ];

  const ERROR_NAMES = {
    '-1': 'Processing error',
    10001: 'Bill unpaid',
    10002: 'Unknown SKU',
    10003: 'Invalid quantity',
    10004: 'Out of stock',
    10005: 'Fulfilment rejected',
    10006: 'Fulfilment unavailable',
    10007: 'Cancelled',
    10008: 'Parcel overweight',
    10009: 'Delivery limit reached',
    10010: 'Duplicate order',
    10011: 'Handled by a newer submission',
  };
  const BILL_UNPAID = 10001;

  const TASK_STATUS = {
    TASK_STATUS_PROCESSING: ['Processing', 'processing'],
    TASK_STATUS_SUCCEEDED: ['Succeeded', 'ok'],
    TASK_STATUS_FAILED: ['Failed', 'bad'],
    TASK_STATUS_CANCELLED: ['Cancelled', 'muted'],
  };
  const PAY_STATUS = {
    PAYMENT_STATUS_UNPAID: ['Unpaid', 'processing'],
    PAYMENT_STATUS_PAID: ['Paid', 'ok'],
    PAYMENT_STATUS_CLOSED: ['Closed', 'muted'],
  };

  // ---- small helpers -------------------------------------------------

  const el = (tag, attrs = {}, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  };
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const fmtTime = (s) => {
    if (!s) return '—';
    const d = new Date(s);
    return Number.isNaN(d.getTime()) ? s : d.toLocaleString();
  };
  const fmtGrams = (g) => {
    const n = Number(g || 0);
    return n >= 1000 ? `${(n / 1000).toFixed(n % 1000 ? 1 : 0)} kg` : `${n} g`;
  };
  const fmtFen = (f) => `¥${(Number(f || 0) / 100).toFixed(2)}`;
  const codeName = (c) => ERROR_NAMES[c] || 'Error';
  const show = (node, on = true) => { node.hidden = !on; };
  const setError = (node, msg) => { node.textContent = msg || ''; show(node, !!msg); };
  const randomCode = (prefix) => {
    const d = new Date();
    const p = (n) => String(n).padStart(2, '0');
    const rnd = Math.floor(Math.random() * 46656).toString(36).toUpperCase().padStart(3, '0');
    return `${prefix}${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}-${rnd}`;
  };
  const newRequestId = () => (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`.replace('.', ''));

  // ---- API -----------------------------------------------------------

  /** An error answer of the REST API (google.rpc.Status). */
  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.message) || `HTTP ${status}`);
      this.status = status;
      this.code = body && body.code;
      const info = ((body && body.details) || []).find((d) => String(d['@type'] || '').endsWith('google.rpc.ErrorInfo'));
      this.reason = info ? info.reason : '';
      this.field = info && info.metadata ? info.metadata.field || '' : '';
    }
  }
  /** The server could not be reached at all. */
  class NetworkError extends Error {}

  const token = () => sessionStorage.getItem(TOKEN_KEY);

  async function api(method, path, body, signal) {
    const headers = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const t = token();
    if (t) headers.Authorization = `Bearer ${t}`;
    let resp;
    try {
      resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new NetworkError('Lost connection to the server.');
    }
    connectionRestored();
    const text = await resp.text().catch(() => '');
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (!resp.ok) {
      const err = new ApiError(resp.status, data);
      if (resp.status === 401 && !path.startsWith('/v1/dev/')) signOut('Your session has expired or is not valid. Sign in again.');
      throw err;
    }
    return data;
  }

  /** describe turns an error into a sentence for the member. */
  function describe(err, what) {
    if (err instanceof NetworkError) {
      return 'Lost connection to the server. Check your network and try again.';
    }
    if (!(err instanceof ApiError)) return `Unexpected error: ${err.message}`;
    const field = err.field ? ` (field: ${err.field})` : '';
    switch (true) {
      case err.status === 400:
        return `Please check your input${field}: ${err.message}`;
      case err.status === 401:
        return 'You are not signed in or your session has expired. Sign in again.';
      case err.status === 403:
        return 'You are not allowed to do that.';
      case err.status === 404:
        return `${what || 'It'} does not exist or has expired.`;
      case err.status === 409 || err.status === 412 || err.code === 9:
        return err.message;
      case err.status === 413:
        return `The request is too large${field}. Remove some items and try again.`;
      case err.status === 429:
        return 'Too many requests. Wait a moment and try again.';
      case err.status === 503:
        return `The service is temporarily unavailable (${err.message}). Try again in a moment.`;
      case err.status >= 500:
        return `The server had a problem (HTTP ${err.status}). Try again in a moment.`;
      default:
        return `${err.message}${field}`;
    }
  }

  const banner = $('#banner');
  let offline = false;
  function connectionLost() {
    offline = true;
    banner.textContent = 'Cannot reach the server. Check your connection; the page carries on when the server answers again.';
    show(banner);
  }
  function connectionRestored() {
    if (!offline) return;
    offline = false;
    show(banner, false);
  }
  window.addEventListener('offline', connectionLost);
  window.addEventListener('online', connectionRestored);

  // ---- session -------------------------------------------------------

  function signedIn() { return !!token(); }

  function signOut(msg) {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(MEMBER_KEY);
    stopFollowing();
    stopPaymentPoll();
    setError($('#login-error'), msg || '');
    if (location.hash !== '#/login') location.hash = '#/login';
    else route();
  }

  $('#login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $('#member-id');
    const memberId = input.value.trim();
    setError($('#login-error'), '');
    input.removeAttribute('aria-invalid');
    if (!memberId) {
      input.setAttribute('aria-invalid', 'true');
      setError($('#login-error'), 'Enter a member id.');
      input.focus();
      return;
    }
    const btn = $('#login-submit');
    btn.disabled = true;
    try {
      const res = await api('POST', '/v1/dev/login', { memberId });
      sessionStorage.setItem(TOKEN_KEY, res.token);
      sessionStorage.setItem(MEMBER_KEY, res.memberId);
      const want = sessionStorage.getItem('orderflow.after-login');
      sessionStorage.removeItem('orderflow.after-login');
      location.hash = want && want !== '#/login' ? want : '#/split';
    } catch (err) {
      const msg = err instanceof ApiError && err.status === 404
        ? 'Dev sign-in is turned off on this gateway (ORDERFLOW_DEV_LOGIN).'
        : describe(err);
      input.setAttribute('aria-invalid', 'true');
      setError($('#login-error'), msg);
      input.focus();
    } finally {
      btn.disabled = false;
    }
  });
  $('#logout').addEventListener('click', () => signOut());

  // ---- routing -------------------------------------------------------

  const views = ['login', 'split', 'task', 'history', 'payments'];

  function showView(name) {
    for (const v of views) show($(`#view-${v}`), v === name);
    const inApp = name !== 'login';
    show($('#nav'), inApp);
    show($('#session'), inApp);
    $('#who').textContent = sessionStorage.getItem(MEMBER_KEY) || '';
    for (const a of document.querySelectorAll('#nav a[data-view]')) {
      if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  let firstRoute = true;
  function route() {
    const hash = location.hash || '#/split';
    const [, view, arg] = hash.match(/^#\/([a-z]+)(?:\/(.+))?$/) || [null, 'split', null];
    if (!signedIn() && view !== 'login') {
      sessionStorage.setItem('orderflow.after-login', hash);
      location.hash = '#/login';
      return;
    }
    if (view !== 'task') stopFollowing();
    if (view !== 'payments') stopPaymentPoll();
    const title = { login: 'Sign in', split: 'New order split', task: 'Task', history: 'Task history', payments: 'Payments' };
    switch (view) {
      case 'login':
        if (signedIn()) { location.hash = '#/split'; return; }
        showView('login');
        break;
      case 'task':
        showView('task');
        openTask(decodeURIComponent(arg || ''));
        break;
      case 'history':
        showView('history');
        loadHistory('');
        break;
      case 'payments':
        showView('payments');
        if (arg) loadPayment(decodeURIComponent(arg));
        break;
      default:
        showView('split');
        ensureForm();
    }
    document.title = `${title[view] || 'orderflow'} · orderflow`;
    // Move focus to the new view's heading region for keyboard and
    // screen-reader users (not on the first load).
    if (!firstRoute) {
      const h = document.querySelector(`#view-${view} h1`);
      if (h) { h.setAttribute('tabindex', '-1'); h.focus({ preventScroll: false }); }
    } else if (view === 'login') {
      $('#member-id').focus();
    }
    firstRoute = false;
  }
  window.addEventListener('hashchange', route);

  // ---- the split form -------------------------------------------------

  const itemsBody = $('#items');
  let formReady = false;
  let pendingRequestId = null; // kept across retries of the same order

  function ensureForm() {
    if (formReady) return;
    formReady = true;
    const dl = $('#skus');
    for (const s of CATALOGUE) dl.append(el('option', { value: s }));
    resetSample();
  }

  function resetSample() {
    $('#order-code').value = randomCode('SO');
    itemsBody.replaceChildren();
    for (const it of SAMPLE_ITEMS) addRow(it);
    pendingRequestId = null;
    clearFieldErrors();
    setError($('#split-error'), '');
  }

  function renumber() {
    [...itemsBody.rows].forEach((row, i) => {
      row.querySelector('.in-code').dataset.field = `items[${i}].itemCode`;
      row.querySelector('.in-sku').dataset.field = `items[${i}].sku`;
      row.querySelector('.in-qty').dataset.field = `items[${i}].quantity`;
      row.querySelector('.in-code').setAttribute('aria-label', `Item ${i + 1} code`);
      row.querySelector('.in-sku').setAttribute('aria-label', `Item ${i + 1} SKU`);
      row.querySelector('.in-qty').setAttribute('aria-label', `Item ${i + 1} quantity`);
      row.querySelector('.remove').setAttribute('aria-label', `Remove item ${i + 1}`);
    });
  }

  function nextItemCode() {
    const used = new Set([...itemsBody.querySelectorAll('.in-code')].map((i) => i.value));
    for (let n = itemsBody.rows.length + 1; ; n++) if (!used.has(`A${n}`)) return `A${n}`;
  }

  function addRow(it) {
    const row = el('tr', {},
      el('td', {}, el('input', { class: 'in-code', value: it.itemCode, required: true, maxlength: 64, spellcheck: 'false' })),
      el('td', {}, el('input', { class: 'in-sku', value: it.sku, list: 'skus', required: true, maxlength: 64, spellcheck: 'false' })),
      el('td', { class: 'num' }, el('input', { class: 'in-qty', type: 'number', min: 1, step: 1, value: it.quantity, required: true, inputmode: 'numeric' })),
      el('td', { class: 'end' }, el('button', { type: 'button', class: 'button ghost small remove', text: 'Remove' })),
    );
    itemsBody.append(row);
    renumber();
    return row;
  }

  itemsBody.addEventListener('click', (ev) => {
    const btn = ev.target.closest('button.remove');
    if (!btn) return;
    const row = btn.closest('tr');
    const next = row.nextElementSibling || row.previousElementSibling;
    row.remove();
    renumber();
    pendingRequestId = null;
    (next ? next.querySelector('.remove') : $('#add-item')).focus();
  });
  $('#split-form').addEventListener('input', () => { pendingRequestId = null; });
  $('#add-item').addEventListener('click', () => {
    const row = addRow({ itemCode: nextItemCode(), sku: '', quantity: 1 });
    pendingRequestId = null;
    row.querySelector('.in-sku').focus();
  });
  $('#reset-sample').addEventListener('click', resetSample);

  function clearFieldErrors() {
    for (const i of document.querySelectorAll('[aria-invalid]')) i.removeAttribute('aria-invalid');
  }

  function markField(field) {
    if (!field) return;
    const input = document.querySelector(`[data-field="${CSS.escape(field)}"]:not([hidden])`);
    if (input && input.offsetParent !== null) {
      input.setAttribute('aria-invalid', 'true');
      input.focus();
    }
  }

  $('#split-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearFieldErrors();
    setError($('#split-error'), '');
    const items = [...itemsBody.rows].map((row) => ({
      itemCode: row.querySelector('.in-code').value.trim(),
      sku: row.querySelector('.in-sku').value.trim(),
      quantity: Number(row.querySelector('.in-qty').value),
    }));
    const body = { orderCode: $('#order-code').value.trim(), items };
    pendingRequestId = pendingRequestId || newRequestId().replace(/[^A-Za-z0-9_-]/g, '').slice(0, 64);
    body.requestId = pendingRequestId;
    const btn = $('#submit-split');
    btn.disabled = true;
    btn.textContent = 'Submitting…';
    try {
      const task = await api('POST', '/v1/order-splits', body);
      pendingRequestId = null;
      formReady = false; // a fresh sample order next time
      currentTask = task;
      location.hash = `#/task/${encodeURIComponent(task.taskId)}`;
    } catch (err) {
      setError($('#split-error'), describe(err, 'The order'));
      if (err instanceof ApiError) markField(err.field);
      if (err instanceof NetworkError) connectionLost();
    } finally {
      btn.disabled = false;
      btn.textContent = 'Split order';
    }
  });

  // ---- the task view -------------------------------------------------

  let currentTask = null; // the task the submit answered, shown at once
  let follow = null; // { id, abort: AbortController }

  function stopFollowing() {
    if (follow) follow.abort.abort();
    follow = null;
  }

  function openTask(id) {
    stopFollowing();
    $('#task-id').textContent = id;
    setError($('#task-error'), '');
    show($('#task-result'), false);
    show($('#cancel-task'), false);
    show($('#refresh-task'), false);
    $('#task-meta').replaceChildren();
    setBadge($('#task-badge'), null);
    $('#task-status').textContent = 'Loading…';
    const f = { id, abort: new AbortController() };
    follow = f;
    const first = currentTask && currentTask.taskId === id ? currentTask : null;
    currentTask = null;
    if (first) renderTask(first);
    (FOLLOW_WATCH ? watchTask(f).catch(() => pollTask(f, !!first)) : pollTask(f, !!first)).catch(() => {});
  }

  const terminal = (t) => t && t.status && t.status !== 'TASK_STATUS_PROCESSING';

  /** pollTask follows the seed's rule: every POLL_MS, at most POLL_TRIES tries. */
  async function pollTask(f, waitFirst) {
    for (let tryNo = 1; tryNo <= POLL_TRIES; tryNo++) {
      if (waitFirst || tryNo > 1) await sleep(POLL_MS);
      if (follow !== f) return;
      try {
        const task = await api('GET', `/v1/tasks/${encodeURIComponent(f.id)}`, undefined, f.abort.signal);
        if (follow !== f) return;
        renderTask(task, tryNo);
        if (terminal(task)) { follow = null; return; }
      } catch (err) {
        if (follow !== f || err.name === 'AbortError') return;
        if (err instanceof NetworkError) {
          connectionLost();
          $('#task-status').textContent = `Lost connection to the server; retrying (try ${tryNo} of ${POLL_TRIES})…`;
          continue;
        }
        taskFailedToLoad(err);
        follow = null;
        return;
      }
    }
    if (follow !== f) return;
    follow = null;
    $('#task-status').textContent = 'Still processing — check your task history later.';
    show($('#refresh-task'));
  }

  /** watchTask follows the server stream (newline-delimited JSON). */
  async function watchTask(f) {
    const resp = await fetch(`/v1/tasks/${encodeURIComponent(f.id)}:watch`, {
      headers: { Authorization: `Bearer ${token()}`, Accept: 'application/json' },
      signal: f.abort.signal,
    });
    if (!resp.ok || !resp.body) throw new Error(`watch: HTTP ${resp.status}`);
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        const msg = JSON.parse(line);
        if (msg.error) throw new ApiError(404, msg.error);
        if (follow !== f) return;
        renderTask(msg.result);
        if (terminal(msg.result)) { follow = null; return; }
      }
    }
    throw new Error('watch ended early');
  }

  function taskFailedToLoad(err) {
    $('#task-status').textContent = '';
    setBadge($('#task-badge'), null);
    setError($('#task-error'), err instanceof ApiError && err.status === 404
      ? `Task ${$('#task-id').textContent} does not exist or has expired.`
      : describe(err, 'The task'));
    show($('#refresh-task'), !(err instanceof ApiError && err.status === 404));
  }

  function setBadge(node, pair) {
    node.className = 'badge';
    node.textContent = '';
    if (!pair) return;
    node.textContent = pair[0];
    node.classList.add(pair[1]);
  }

  function metaList(node, pairs) {
    node.replaceChildren();
    for (const [k, v] of pairs) {
      if (v === undefined || v === null || v === '') continue;
      node.append(el('div', {}, el('dt', { text: k }), el('dd', { text: v })));
    }
  }

  function renderTask(task, tryNo) {
    const st = TASK_STATUS[task.status] || [task.status, 'muted'];
    setBadge($('#task-badge'), st);
    metaList($('#task-meta'), [
      ['Order code', task.orderCode],
      ['Created', fmtTime(task.createTime)],
      ['Updated', fmtTime(task.updateTime)],
      ['Expires', fmtTime(task.expireTime)],
    ]);
    const processing = task.status === 'TASK_STATUS_PROCESSING';
    show($('#cancel-task'), processing);
    show($('#refresh-task'), false);
    if (processing) {
      $('#task-status').textContent = tryNo
        ? `Processing… checking every ${POLL_MS / 1000} s (${tryNo} of ${POLL_TRIES}).`
        : 'Submitted. Processing…';
      show($('#task-result'), false);
      setError($('#task-error'), '');
      return;
    }
    if (task.status === 'TASK_STATUS_FAILED') {
      $('#task-status').textContent = 'The task failed.';
      setError($('#task-error'), `${task.errorMsg || codeName(task.errorCode)} (code ${task.errorCode})`);
    } else if (task.status === 'TASK_STATUS_CANCELLED') {
      $('#task-status').textContent = 'The task was cancelled.';
      setError($('#task-error'), task.errorMsg ? `${task.errorMsg}` : '');
    } else {
      $('#task-status').textContent = 'Done.';
      setError($('#task-error'), '');
    }
    renderResult(task.result);
  }

  function renderResult(r) {
    if (!r || (!r.total && !(r.shipments || []).length && !(r.failures || []).length)) {
      show($('#task-result'), false);
      return;
    }
    const stat = (label, value, cls) => el('div', { class: `stat ${cls || ''}` },
      el('span', { class: 'stat-value', text: String(value ?? 0) }), el('span', { class: 'stat-label', text: label }));
    $('#task-summary').replaceChildren(
      stat('items', r.total, 'total'),
      stat('succeeded', r.succeeded, 'ok'),
      stat('failed', r.failed, r.failed ? 'bad' : ''),
    );
    if (r.errorCode) {
      $('#task-summary').append(el('p', { class: 'result-code' },
        el('span', { class: 'code', text: String(r.errorCode) }), ` ${r.errorMsg || codeName(r.errorCode)}`));
    }
    const ships = r.shipments || [];
    $('#shipments').replaceChildren(...(ships.length ? ships.map((s) => el('tr', {},
      el('td', {}, el('code', { text: s.shipmentId })),
      el('td', { text: s.warehouse }),
      el('td', {}, el('ul', { class: 'lines' }, ...(s.lines || []).map((l) =>
        el('li', {}, el('code', { text: l.itemCode }), ` ${l.sku} × ${l.quantity}`)))),
      el('td', { class: 'num', text: fmtGrams(s.weightGrams) }),
    )) : [el('tr', {}, el('td', { colspan: 4, class: 'empty', text: 'No shipments.' }))]));
    const fails = r.failures || [];
    $('#failures').replaceChildren(...(fails.length ? fails.map((f) => el('tr', { 'data-code': f.errorCode },
      el('td', {}, el('code', { text: f.itemCode })),
      el('td', { class: 'num' }, el('span', { class: 'code', text: String(f.errorCode) })),
      el('td', { text: f.errorMsg || codeName(f.errorCode) }),
    )) : [el('tr', {}, el('td', { colspan: 3, class: 'empty', text: 'No failed items.' }))]));
    show($('#task-result'));
    if (r.errorCode === BILL_UNPAID) openBillDialog();
  }

  $('#cancel-task').addEventListener('click', async () => {
    const id = $('#task-id').textContent;
    try {
      const task = await api('POST', `/v1/tasks/${encodeURIComponent(id)}:cancel`, {});
      stopFollowing();
      renderTask(task);
    } catch (err) {
      setError($('#task-error'), describe(err, 'The task'));
    }
  });
  $('#refresh-task').addEventListener('click', () => openTask($('#task-id').textContent));

  // ---- the 10001 dialog ----------------------------------------------

  const billDialog = $('#bill-dialog');
  let dialogReturn = null;
  function openBillDialog() {
    if (billDialog.open) return;
    dialogReturn = document.activeElement;
    billDialog.showModal(); // Esc closes it (the browser's cancel)
    $('#bill-go').focus();
  }
  $('#bill-close').addEventListener('click', () => billDialog.close());
  $('#bill-go').addEventListener('click', () => billDialog.close());
  billDialog.addEventListener('close', () => {
    if (dialogReturn && document.contains(dialogReturn) && location.hash.startsWith('#/task/')) dialogReturn.focus();
    dialogReturn = null;
  });

  // ---- task history --------------------------------------------------

  const PAGE_SIZE = 10;
  let pageTokens = ['']; // tokens of the pages seen, for "Newest"
  let nextToken = '';

  async function loadHistory(pageToken) {
    setError($('#history-error'), '');
    const q = new URLSearchParams({ pageSize: PAGE_SIZE });
    if (pageToken) q.set('pageToken', pageToken);
    if (!pageToken) pageTokens = [''];
    try {
      const res = await api('GET', `/v1/tasks?${q}`);
      const tasks = res.tasks || [];
      nextToken = res.nextPageToken || '';
      renderHistory(tasks);
      $('#history-page').textContent = `Page ${pageTokens.length}`;
      $('#history-next').disabled = !nextToken;
      $('#history-first').disabled = pageTokens.length <= 1;
    } catch (err) {
      setError($('#history-error'), describe(err, 'The page'));
      if (err instanceof NetworkError) connectionLost();
    }
  }

  function resultText(t) {
    const r = t.result;
    if (t.status === 'TASK_STATUS_FAILED') return `${t.errorCode}: ${t.errorMsg || codeName(t.errorCode)}`;
    if (!r || !r.total) return '—';
    return `${r.succeeded}/${r.total} shipped${r.failed ? `, ${r.failed} failed` : ''}`;
  }

  function renderHistory(tasks) {
    const body = $('#history');
    if (!tasks.length) {
      body.replaceChildren(el('tr', {}, el('td', { colspan: 5, class: 'empty', text: 'No tasks yet. Submit an order split to see it here.' })));
      return;
    }
    body.replaceChildren(...tasks.map((t) => {
      const st = TASK_STATUS[t.status] || [t.status, 'muted'];
      const open = el('a', { class: 'button small', href: `#/task/${encodeURIComponent(t.taskId)}`, 'aria-label': `Open task for order ${t.orderCode}`, text: 'Open' });
      const cancel = t.status === 'TASK_STATUS_PROCESSING'
        ? el('button', { type: 'button', class: 'button small danger', 'aria-label': `Cancel task for order ${t.orderCode}`, text: 'Cancel',
          onclick: async (ev) => {
            ev.target.disabled = true;
            try {
              await api('POST', `/v1/tasks/${encodeURIComponent(t.taskId)}:cancel`, {});
            } catch (err) {
              setError($('#history-error'), describe(err, 'The task'));
            }
            loadHistory(pageTokens[pageTokens.length - 1]);
          } })
        : null;
      return el('tr', { 'data-task-id': t.taskId },
        el('td', { text: fmtTime(t.createTime) }),
        el('td', {}, el('code', { text: t.orderCode || '—' })),
        el('td', {}, el('span', { class: `badge ${st[1]}`, text: st[0] })),
        el('td', { text: resultText(t) }),
        el('td', { class: 'end' }, el('div', { class: 'actions end' }, open, cancel)),
      );
    }));
  }

  $('#history-next').addEventListener('click', () => {
    if (!nextToken) return;
    pageTokens.push(nextToken);
    loadHistory(nextToken);
  });
  $('#history-first').addEventListener('click', () => loadHistory(''));
  $('#open-task-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('#open-task-id').value.trim();
    if (!id) {
      $('#open-task-id').setAttribute('aria-invalid', 'true');
      setError($('#history-error'), 'Enter a task id.');
      $('#open-task-id').focus();
      return;
    }
    $('#open-task-id').removeAttribute('aria-invalid');
    location.hash = `#/task/${encodeURIComponent(id)}`;
  });

  // ---- payments ------------------------------------------------------

  let payPoll = null;
  function stopPaymentPoll() {
    if (payPoll) payPoll.abort();
    payPoll = null;
  }

  $('#pay-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearFieldErrors();
    setError($('#pay-error'), '');
    const body = {
      orderCode: $('#pay-order').value.trim(),
      amountFen: String(Math.trunc(Number($('#pay-amount').value))),
      description: $('#pay-desc').value.trim(),
    };
    const btn = $('#pay-submit');
    btn.disabled = true;
    try {
      const p = await api('POST', '/v1/payments', body);
      $('#pay-order').value = randomCode('PAY');
      showPayment(p);
      location.hash = `#/payments/${encodeURIComponent(p.orderCode)}`;
    } catch (err) {
      setError($('#pay-error'), describe(err, 'The payment'));
      if (err instanceof ApiError) markField(err.field);
      if (err instanceof NetworkError) connectionLost();
    } finally {
      btn.disabled = false;
    }
  });
  const amountHint = () => {
    const fen = Math.trunc(Number($('#pay-amount').value));
    $('#pay-amount-hint').textContent = fen > 0 ? `${fmtFen(fen)} (1 yuan = 100 fen)` : '1 yuan = 100 fen';
  };
  $('#pay-amount').addEventListener('input', amountHint);
  $('#pay-lookup').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const code = $('#pay-lookup-code').value.trim();
    if (code) location.hash = `#/payments/${encodeURIComponent(code)}`;
  });

  let shownPayment = null;

  // The QR code of an unpaid payment: a PNG rendered by the gateway for the
  // caller's own payment (GET /v1/payments/{code}/qr, bearer token), shown
  // as a data: URL so the page's CSP needs no other image source.
  let qrFor = null;
  async function showQR(p) {
    const fig = $('#payment-qr');
    const img = $('#payment-qr-img');
    if (p.status !== 'PAYMENT_STATUS_UNPAID' || !p.codeUrl) {
      show(fig, false);
      qrFor = null;
      img.removeAttribute('src');
      return;
    }
    if (qrFor === p.orderCode) return;
    qrFor = p.orderCode;
    show(fig, false);
    try {
      const resp = await fetch(`/v1/payments/${encodeURIComponent(p.orderCode)}/qr`, {
        headers: { Authorization: `Bearer ${token()}`, Accept: 'image/png' },
      });
      if (!resp.ok) throw new Error(`QR code: HTTP ${resp.status}`);
      const blob = await resp.blob();
      const url = await new Promise((resolve, reject) => {
        const r = new FileReader();
        r.onload = () => resolve(r.result);
        r.onerror = () => reject(r.error);
        r.readAsDataURL(blob);
      });
      if (qrFor !== p.orderCode) return;
      img.src = url;
      show(fig);
    } catch (e) {
      if (qrFor === p.orderCode) qrFor = null;
    }
  }
  function showPayment(p) {
    shownPayment = p.orderCode;
    renderPayment(p);
  }

  async function loadPayment(code) {
    stopPaymentPoll();
    setError($('#pay-error'), '');
    if (!$('#pay-order').value) $('#pay-order').value = randomCode('PAY');
    const ctl = new AbortController();
    payPoll = ctl;
    if (shownPayment !== code) show($('#payment'), false);
    for (;;) {
      let p;
      try {
        p = await api('GET', `/v1/payments/${encodeURIComponent(code)}`, undefined, ctl.signal);
      } catch (err) {
        if (payPoll !== ctl || err.name === 'AbortError') return;
        if (err instanceof NetworkError) { connectionLost(); await sleep(PAY_POLL_MS); continue; }
        setError($('#pay-error'), describe(err, `Payment ${code}`));
        show($('#payment'), false);
        payPoll = null;
        return;
      }
      if (payPoll !== ctl) return;
      showPayment(p);
      if (p.status !== 'PAYMENT_STATUS_UNPAID') { payPoll = null; return; }
      await sleep(PAY_POLL_MS);
      if (payPoll !== ctl) return;
    }
  }

  function renderPayment(p) {
    show($('#payment'));
    $('#payment-code').textContent = p.orderCode;
    const st = PAY_STATUS[p.status] || [p.status, 'muted'];
    setBadge($('#payment-badge'), st);
    $('#payment-status').textContent = {
      PAYMENT_STATUS_UNPAID: 'Waiting for the shopper to pay. The reconciler checks the provider on a schedule.',
      PAYMENT_STATUS_PAID: 'Paid.',
      PAYMENT_STATUS_CLOSED: 'Closed: not paid in time, the order was closed at the provider.',
    }[p.status] || '';
    showQR(p);
    metaList($('#payment-meta'), [
      ['Amount', fmtFen(p.amountFen)],
      ['Description', p.description],
      ['Created', p.createTime ? fmtTime(p.createTime) : ''],
      ['Next check', p.status === 'PAYMENT_STATUS_UNPAID' && p.nextCheckTime ? fmtTime(p.nextCheckTime) : ''],
      ['Paid', p.paidTime ? fmtTime(p.paidTime) : ''],
      ['Closed', p.closedTime ? fmtTime(p.closedTime) : ''],
      ['Transaction', p.transactionId],
    ]);
    const at = p.attempts || [];
    $('#attempts').replaceChildren(...(at.length ? at.map((a) => el('tr', {},
      el('td', { text: fmtTime(a.time) }),
      el('td', { text: a.action || 'query' }),
      el('td', {}, el('code', { text: a.tradeState || '—' })),
    )) : [el('tr', {}, el('td', { colspan: 3, class: 'empty', text: 'No attempts yet.' }))]));
  }

  // ---- start ---------------------------------------------------------

  $('#pay-order').value = randomCode('PAY');
  amountHint();
  route();
})();
