// orderflow operations page: the admin's view of the job queue, tasks,
// dead letters, the slot pool, payments and the audit stream, over
// /v1/ops/... with the token kept in sessionStorage. No framework; every
// mutation asks for confirmation in a <dialog>.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const KEY = 'orderflow.ops.token';
  const body = document.body;
  const params = new URLSearchParams(location.search);
  const refreshMs = Number(params.get('refreshMs') || body.dataset.refreshMs || 3000);
  let token = sessionStorage.getItem(KEY) || '';
  let timer = null;
  const pages = { tasks: null, dead: '', audit: '', stuck: '' };

  class APIError extends Error {
    constructor(status, body) {
      super((body && body.message) || ('HTTP ' + status));
      this.status = status;
      this.body = body;
    }
  }

  async function api(method, path, payload) {
    const opts = { method, headers: { Authorization: 'Bearer ' + token } };
    if (payload !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(payload);
    }
    let res;
    try {
      res = await fetch(path, opts);
    } catch (e) {
      banner('Connection lost — retrying on the next refresh.');
      throw e;
    }
    banner('');
    const text = await res.text();
    const data = text ? JSON.parse(text) : {};
    if (!res.ok) {
      if (res.status === 401) {
        signOut('Your token is missing, invalid or expired (401). Sign in again.');
      }
      throw new APIError(res.status, data);
    }
    return data;
  }

  function banner(msg) {
    $('banner').textContent = msg;
    $('banner').hidden = !msg;
  }

  function showError(id, err) {
    const el = $(id);
    if (!err) { el.hidden = true; el.textContent = ''; return; }
    let msg = err.message || String(err);
    if (err.status === 403) {
      msg = 'Permission denied (403): this token does not carry the admin role.';
    } else if (err.status) {
      msg = err.status + ': ' + msg;
    }
    el.textContent = msg;
    el.hidden = false;
  }

  function cell(tr, text, cls) {
    const td = document.createElement('td');
    td.textContent = text == null ? '' : String(text);
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function button(label, cls, onClick) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'button small ' + (cls || '');
    b.textContent = label;
    b.addEventListener('click', onClick);
    return b;
  }

  function empty(tbody, cols, text) {
    const tr = document.createElement('tr');
    const td = cell(tr, text, 'empty');
    td.colSpan = cols;
    tbody.appendChild(tr);
  }

  function when(ts) {
    return ts ? new Date(ts).toLocaleString() : '';
  }

  function stat(label, value) {
    const d = document.createElement('div');
    d.className = 'stat';
    const v = document.createElement('span');
    v.className = 'stat-value';
    v.textContent = value;
    const l = document.createElement('span');
    l.className = 'stat-label';
    l.textContent = label;
    d.append(v, l);
    return d;
  }

  function secs(d) {
    return d ? Math.round(parseFloat(d)) + ' s' : '0 s';
  }

  // confirm opens the dialog; resolves with the error code typed (when
  // asked for) or null when the operator cancels.
  function confirmAction(text, askCode, code) {
    const dlg = $('confirm-dialog');
    $('confirm-text').textContent = text;
    $('confirm-code-field').hidden = !askCode;
    $('confirm-code').value = code || '';
    return new Promise((resolve) => {
      dlg.addEventListener('close', function onClose() {
        dlg.removeEventListener('close', onClose);
        resolve(dlg.returnValue === 'ok' ? ($('confirm-code').value || '') : null);
      });
      dlg.returnValue = '';
      dlg.showModal();
      $('confirm-cancel').focus();
    });
  }

  async function mutate(text, errId, fn, askCode, code) {
    const answer = await confirmAction(text, askCode, code);
    if (answer === null) return;
    let failed = null;
    try {
      await fn(answer);
      showError(errId, null);
    } catch (e) {
      failed = e;
    }
    await refreshAll();
    // The refresh clears its sections' errors: the mutation's comes last.
    if (failed) showError(errId, failed);
  }

  // unacked is a queue's deliveries held unacknowledged by the
  // split-workers (the sum of their live reports).
  function unacked(q) {
    return q.unacknowledgedError ? 'n/a' : Number(q.unacknowledged || 0);
  }

  // ---- overview ----
  async function overview() {
    try {
      const o = await api('GET', '/v1/ops/overview');
      const box = $('overview-stats');
      box.textContent = '';
      const q = o.queue || {}, dlq = o.deadLetterQueue || {}, t = o.tasks || {}, p = o.slotPool || {};
      box.append(
        stat('queue ready', q.error ? 'n/a' : q.ready),
        stat('queue unacknowledged', unacked(q)),
        stat('queue consumers', q.error ? 'n/a' : q.consumers),
        stat('overflow queue ready', !o.overflowQueue || o.overflowQueue.error ? 'n/a' : o.overflowQueue.ready),
        stat('overflow queue unacknowledged', o.overflowQueue ? unacked(o.overflowQueue) : 'n/a'),
        stat('overflow queue consumers', !o.overflowQueue || o.overflowQueue.error ? 'n/a' : o.overflowQueue.consumers),
        stat('dead-letter queue ready', dlq.error ? 'n/a' : dlq.ready),
        stat('dead-letter queue unacknowledged', unacked(dlq)),
        stat('split-workers reporting', q.unacknowledgedError ? 'n/a' : (q.reportingReplicas || 0)),
        stat('dead letters', o.deadLetters),
        stat('tasks processing', t.processing),
        stat('processing > 1 min', t.olderThan1m),
        stat('processing > 5 min', t.olderThan5m),
        stat('processing > 30 min', t.olderThan30m),
        stat('slots in use', (p.inUse || 0) + ' / ' + (p.capacity || 0)),
        stat('slot waiters', p.waiting || 0),
        stat('oldest slot wait', secs(p.oldestWait)),
      );
      const pay = o.payments;
      if (pay) {
        box.append(
          stat('checks pending', pay.pending),
          stat('next check due', pay.nextDueTime ? when(pay.nextDueTime) : '—'),
          stat('checks overdue', pay.overdue + (pay.overdueCapped ? '+' : '')),
          stat('most overdue by', secs(pay.maxLateness)),
          stat('checks in flight', pay.inFlight),
          stat('payments unpaid (tracked)', pay.unpaidTracked),
          stat('paid today', pay.paidToday),
          stat('closed today', pay.closedToday),
          stat('payments stuck', pay.stuck),
        );
      }
      renderRates(o.errorRates || [], (pay && pay.answers) || []);
      $('overview-time').textContent = 'as of ' + when(o.time);
      const problem = q.error ? 'job queue: ' + q.error
        : o.paymentsError ? 'payments: ' + o.paymentsError
        : o.errorRatesError ? 'error rates: ' + o.errorRatesError : '';
      showError('overview-error', problem ? new Error(problem) : null);
      return true;
    } catch (e) {
      showError('overview-error', e);
      return false;
    }
  }

  // rate is "n (x/min)" over a window of the given start and end times.
  function rate(n, start, end) {
    const count = Number(n || 0);
    const mins = (new Date(end) - new Date(start)) / 60000;
    return count + (mins > 0 ? ' (' + (count / mins).toFixed(2) + '/min)' : '');
  }

  function share(n, of) {
    const a = Number(n || 0), b = Number(of || 0);
    return a + (b > 0 ? ' (' + (100 * a / b).toFixed(1) + ' %)' : '');
  }

  // renderRates shows the error rates of the windows (last 5 min, last
  // hour) and the provider's answers of the same windows.
  function renderRates(rates, answers) {
    const tb = $('rates-body');
    tb.textContent = '';
    const n = Math.max(rates.length, answers.length);
    if (n === 0) { empty(tb, 7, 'no error rates'); return; }
    for (let i = 0; i < n; i++) {
      const r = rates[i] || {}, a = answers[i] || {};
      const start = r.startTime || a.startTime, end = r.endTime || a.endTime;
      const tr = document.createElement('tr');
      cell(tr, ['last 5 min', 'last hour'][i] || '');
      cell(tr, rates[i] ? rate(r.tasksFinished, start, end) : 'n/a');
      cell(tr, rates[i] ? share(r.tasksFailed, r.tasksFinished) : 'n/a');
      cell(tr, (r.failedByCode || []).map((c) => c.errorCode + ' ×' + c.count).join(', ') || '—');
      cell(tr, rates[i] ? rate(r.deadLettered, start, end) : 'n/a');
      cell(tr, answers[i] ? rate(a.answers, start, end) : 'n/a');
      cell(tr, answers[i] ? share(a.uncertain, a.answers) : 'n/a');
      tb.appendChild(tr);
    }
  }

  // ---- tasks ----
  function renderTasks(list) {
    const tb = $('tasks-body');
    tb.textContent = '';
    if (!list.length) { empty(tb, 7, 'No tasks found.'); return; }
    for (const s of list) {
      const t = s.task || {};
      const tr = document.createElement('tr');
      cell(tr, s.memberId);
      cell(tr, t.taskId);
      cell(tr, t.orderCode);
      cell(tr, (t.status || '').replace('TASK_STATUS_', ''));
      cell(tr, t.errorCode || '');
      cell(tr, when(t.createTime));
      const td = cell(tr, '');
      td.className = 'actions';
      const ref = '/v1/ops/members/' + encodeURIComponent(s.memberId) + '/tasks/' + encodeURIComponent(t.taskId);
      td.append(button('Details', 'ghost', () => detail(s.memberId, t.taskId)));
      if (t.status === 'TASK_STATUS_PROCESSING') {
        td.append(
          button('Retry', '', () => mutate('Publish the job of task ' + t.taskId + ' again?', 'tasks-error', () => api('POST', ref + ':retry', {}))),
          button('Fail', 'danger', () => mutate('Fail task ' + t.taskId + ' with this code?', 'tasks-error', (c) => api('POST', ref + ':fail', { errorCode: Number(c) }), true, '10006')),
          button('Cancel', 'danger', () => mutate('Cancel task ' + t.taskId + '?', 'tasks-error', () => api('POST', ref + ':cancel', {}))),
        );
      }
      tr.appendChild(td);
      tb.appendChild(tr);
    }
  }

  async function findTasks(ev) {
    if (ev) ev.preventDefault();
    const q = new URLSearchParams();
    if ($('find-task').value.trim()) q.set('taskId', $('find-task').value.trim());
    if ($('find-member').value.trim()) q.set('memberId', $('find-member').value.trim());
    if ($('find-order').value.trim()) q.set('orderCode', $('find-order').value.trim());
    pages.tasks = null;
    $('tasks-next').hidden = true;
    try {
      const r = await api('GET', '/v1/ops/tasks?' + q);
      renderTasks(r.tasks || []);
      showError('tasks-error', null);
    } catch (e) {
      showError('tasks-error', e);
    }
  }

  async function processing(token) {
    const q = new URLSearchParams({ pageSize: '20' });
    const age = Number($('min-age').value || 0);
    if (age > 0) q.set('minAge', age + 's');
    if ($('find-member').value.trim()) q.set('memberId', $('find-member').value.trim());
    if (token) q.set('pageToken', token);
    try {
      const r = await api('GET', '/v1/ops/tasks/processing?' + q);
      renderTasks(r.tasks || []);
      pages.tasks = r.nextPageToken || null;
      $('tasks-next').hidden = !pages.tasks;
      showError('tasks-error', null);
    } catch (e) {
      showError('tasks-error', e);
    }
  }

  async function detail(member, id) {
    try {
      const d = await api('GET', '/v1/ops/members/' + encodeURIComponent(member) + '/tasks/' + encodeURIComponent(id));
      $('detail-title').textContent = member + ' / ' + id;
      const a = Number(d.attempts || 0);
      $('detail-summary').textContent = (a ? 'attempts ' + a : 'not taken by a worker yet') +
        (d.lease ? ' · lease held by ' + (d.lease.replica || d.lease.token) : ' · no lease held');
      $('detail-body').textContent = JSON.stringify(d, null, 2);
      $('task-detail').hidden = false;
      $('detail-body').focus();
    } catch (e) {
      showError('tasks-error', e);
    }
  }

  // ---- dead letters ----
  async function deadLetters(ev, page) {
    if (ev) ev.preventDefault();
    const q = new URLSearchParams({ pageSize: '20' });
    if ($('dead-reason').value.trim()) q.set('reason', $('dead-reason').value.trim());
    if (page) q.set('pageToken', page);
    try {
      const r = await api('GET', '/v1/ops/dead-letters?' + q);
      const tb = $('dead-body');
      tb.textContent = '';
      const list = r.deadLetters || [];
      if (!list.length) empty(tb, 8, 'No dead letters.');
      for (const d of list) {
        const tr = document.createElement('tr');
        cell(tr, d.memberId);
        cell(tr, d.taskId);
        cell(tr, d.orderCode);
        cell(tr, d.reason);
        cell(tr, d.deliveryCount && d.deliveryCount !== '0' ? d.deliveryCount : '—', 'num');
        cell(tr, when(d.time));
        cell(tr, (d.taskStatus || '').replace('TASK_STATUS_', ''));
        const td = cell(tr, '');
        td.className = 'actions';
        const ref = '/v1/ops/members/' + encodeURIComponent(d.memberId) + '/dead-letters/' + encodeURIComponent(d.taskId);
        if (d.replayable) {
          td.append(button('Replay', 'primary', () => mutate('Replay task ' + d.taskId + '? It becomes PROCESSING and its job is published again.', 'dead-error', () => api('POST', ref + ':replay', {}))));
        }
        td.append(button('Discard', 'danger', () => mutate('Discard the dead letter of task ' + d.taskId + '? The task stays FAILED with this code.', 'dead-error', (c) => api('POST', ref + ':discard', { errorCode: Number(c) }), true, '10009')));
        td.append(button('Details', 'ghost', () => detail(d.memberId, d.taskId)));
        tr.appendChild(td);
        tb.appendChild(tr);
      }
      pages.dead = r.nextPageToken || '';
      $('dead-next').hidden = !pages.dead;
      showError('dead-error', null);
    } catch (e) {
      showError('dead-error', e);
    }
  }

  // ---- slot pool ----
  // origin says where a setting's current value came from
  // (SlotSettingOrigin): an operator at run time, or the split-workers'
  // configuration written at a start or by a reset.
  function origin(o) {
    if (!o || !o.source) return 'origin not recorded';
    const at = o.time ? ' at ' + when(o.time) : '';
    if (o.source === 'operator') return 'set by operator ' + (o.actor || 'unknown') + at;
    if (o.source === 'configuration') return 'from configuration' + (o.actor ? ', written by ' + o.actor : '') + at;
    return o.source + (o.actor ? ' ' + o.actor : '') + at;
  }

  // settings shows N, the weights and each setting's origin.
  function settings(st) {
    $('value-capacity').textContent = st.capacity || 0;
    const weighted = (st.groups || []).filter((g) => (g.weight || 1) !== 1);
    $('value-weights').textContent = weighted.length
      ? weighted.map((g) => (g.group || '(no group)') + ' ×' + g.weight).join(', ') + '; others 1'
      : '1 for every member';
    $('origin-capacity').textContent = origin(st.capacityOrigin);
    $('origin-fairness').textContent = origin(st.fairnessOrigin);
    $('origin-weights').textContent = origin(st.weightsOrigin);
  }

  async function slots() {
    try {
      const r = await api('GET', '/v1/ops/slot-pool');
      if (document.activeElement !== $('capacity')) $('capacity').value = (r.stats || {}).capacity || 0;
      settings(r.stats || {});
      const hb = $('holders-body'); hb.textContent = '';
      if (!(r.holders || []).length) empty(hb, 6, 'No slot held.');
      for (const h of r.holders || []) {
        const tr = document.createElement('tr');
        cell(tr, h.jobId); cell(tr, h.group); cell(tr, h.replica || '—'); cell(tr, when(h.since)); cell(tr, when(h.leaseUntil));
        const td = cell(tr, '');
        td.append(button('Release', 'danger', () => mutate('Release the slot of ' + h.jobId + '? Only do this for a holder known to be dead.', 'slots-error', () => api('POST', '/v1/ops/slot-pool/holders/' + encodeURIComponent(h.token) + ':release', { reason: 'holder known dead' }))));
        hb.appendChild(tr);
      }
      const wb = $('waiters-body'); wb.textContent = '';
      if (!(r.waiters || []).length) empty(wb, 6, 'Nobody waits.');
      (r.waiters || []).forEach((w, i) => {
        const tr = document.createElement('tr');
        cell(tr, i + 1); cell(tr, w.jobId); cell(tr, w.group); cell(tr, w.replica || '—'); cell(tr, w.priority); cell(tr, when(w.since));
        wb.appendChild(tr);
      });
      const fb = $('finished-body'); fb.textContent = '';
      for (const f of r.finished || []) {
        const tr = document.createElement('tr');
        cell(tr, f.jobId); cell(tr, f.group); cell(tr, f.outcome); cell(tr, f.detail); cell(tr, secs(f.held)); cell(tr, when(f.time));
        fb.appendChild(tr);
      }
      showError('slots-error', null);
    } catch (e) {
      showError('slots-error', e);
    }
  }

  // ---- payments ----
  let shown = null; // the payment on display: {code, member}
  function checkText(r) {
    const c = r.check || {}, p = r.payment || {};
    if (p.status !== 'PAYMENT_STATUS_UNPAID') return (p.status || '').replace('PAYMENT_STATUS_', '') + ': reconciliation is over.';
    if (!c.scheduled) return 'UNPAID, no check scheduled (tracking cancelled, or the repair has not rescheduled it yet).';
    let s = c.running ? 'Check running (lease until ' + when(c.leaseUntil) + ').' : 'Next check due ' + when(c.dueTime) + '.';
    s += ' Schedule step ' + (c.step || 0) + ', uncertain answers ' + (c.uncertainRetries || 0) + ', handler attempts ' + (c.attempt || 0) + '.';
    return s;
  }

  async function payment(ev, code, member) {
    if (ev) ev.preventDefault();
    if (code) {
      $('pay-order').value = code;
      $('pay-member').value = member || '';
    }
    code = $('pay-order').value.trim();
    member = $('pay-member').value.trim();
    const path = member
      ? '/v1/ops/members/' + encodeURIComponent(member) + '/payments/' + encodeURIComponent(code)
      : '/v1/ops/payments/' + encodeURIComponent(code);
    try {
      if (!code) throw new Error('orderCode: give an order code');
      const r = await api('GET', path);
      shown = { code: code, member: r.memberId };
      const unpaid = (r.payment || {}).status === 'PAYMENT_STATUS_UNPAID';
      $('payment-title').textContent = code + ' (member ' + r.memberId + ')';
      $('payment-check').textContent = checkText(r);
      $('payment-body').textContent = JSON.stringify(r, null, 2);
      $('payment-actions').hidden = !unpaid;
      $('payment-detail').hidden = false;
      showError('payments-error', null);
    } catch (e) {
      shown = null;
      $('payment-detail').hidden = true;
      showError('payments-error', e);
    }
  }

  function runCheck(code) {
    return mutate('Run the due check of payment ' + code + ' now?', 'payments-error', async () => {
      await api('POST', '/v1/ops/payments/' + encodeURIComponent(code) + ':runCheck', {});
      if (shown && shown.code === code) await payment(null, code, '');
    });
  }

  async function stuck(page) {
    const q = new URLSearchParams({ pageSize: '20' });
    if (page) q.set('pageToken', page);
    try {
      const r = await api('GET', '/v1/ops/stuck-payments?' + q);
      const tb = $('stuck-body');
      tb.textContent = '';
      const list = r.payments || [];
      if (!list.length) empty(tb, 7, 'No payment is stuck.');
      for (const s of list) {
        const p = s.payment || {}, c = s.check || {};
        const tr = document.createElement('tr');
        cell(tr, p.orderCode);
        cell(tr, s.memberId);
        cell(tr, s.reason);
        cell(tr, when(s.since));
        cell(tr, c.scheduled ? (c.running ? 'running' : when(c.dueTime)) : '—');
        cell(tr, c.uncertainRetries || 0, 'num');
        const td = cell(tr, '');
        td.className = 'actions';
        td.append(button('Details', 'ghost', () => payment(null, p.orderCode, '')));
        if (s.reason === 'uncertain') td.append(button('Run check now', 'primary', () => runCheck(p.orderCode)));
        tr.appendChild(td);
        tb.appendChild(tr);
      }
      pages.stuck = r.nextPageToken || '';
      $('stuck-next').hidden = !pages.stuck;
    } catch (e) {
      showError('payments-error', e);
    }
  }

  // ---- audit ----
  async function audit(page) {
    const q = new URLSearchParams({ pageSize: '20' });
    if (page) q.set('pageToken', page);
    try {
      const r = await api('GET', '/v1/ops/audit?' + q);
      const tb = $('audit-body'); tb.textContent = '';
      if (!(r.events || []).length) empty(tb, 5, 'No operator action yet.');
      for (const e of r.events || []) {
        const tr = document.createElement('tr');
        cell(tr, when(e.time)); cell(tr, e.actor); cell(tr, e.action); cell(tr, e.target); cell(tr, e.result);
        tb.appendChild(tr);
      }
      pages.audit = r.nextPageToken || '';
      $('audit-next').hidden = !pages.audit;
    } catch (e) {
      // shown by the overview
    }
  }

  // refreshAll reloads every section; each shows its own errors.
  function refreshAll() {
    return Promise.all([overview(), deadLetters(), slots(), stuck(), audit()]);
  }

  function tick() {
    clearTimeout(timer);
    if (!token || !$('live').checked) return;
    timer = setTimeout(async () => {
      await overview();
      tick();
    }, refreshMs);
  }

  // ---- session ----
  async function start() {
    $('view-login').hidden = true;
    $('console').hidden = false;
    $('nav').hidden = false;
    $('session').hidden = false;
    try {
      const claims = JSON.parse(atob(token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')));
      $('who').textContent = claims.sub || 'service';
    } catch (e) {
      $('who').textContent = 'service';
    }
    const ok = await overview();
    if (!ok) return;
    deadLetters();
    slots();
    stuck();
    audit();
    tick();
    $('main').focus();
  }

  function signOut(msg) {
    token = '';
    sessionStorage.removeItem(KEY);
    clearTimeout(timer);
    $('console').hidden = true;
    $('nav').hidden = true;
    $('session').hidden = true;
    $('view-login').hidden = false;
    showError('login-error', msg ? new Error(msg) : null);
  }

  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token').value.trim();
    if (!token) { showError('login-error', new Error('token: paste a token')); $('token').focus(); return; }
    sessionStorage.setItem(KEY, token);
    start();
  });
  $('dev-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const res = await fetch('/v1/dev/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ memberId: $('operator-id').value.trim(), roles: ['admin'] }) });
      const data = await res.json();
      if (!res.ok) throw new APIError(res.status, data);
      token = data.token;
      sessionStorage.setItem(KEY, token);
      start();
    } catch (e) {
      showError('login-error', e.status === 404 ? new Error('development sign-in is off on this gateway: paste an admin token') : e);
    }
  });
  $('logout').addEventListener('click', () => signOut(''));
  $('find-form').addEventListener('submit', findTasks);
  $('list-processing').addEventListener('click', () => processing(''));
  $('tasks-next').addEventListener('click', () => processing(pages.tasks));
  $('dead-form').addEventListener('submit', (ev) => deadLetters(ev));
  $('dead-next').addEventListener('click', () => deadLetters(null, pages.dead));
  $('replay-all').addEventListener('click', () => mutate('Replay every replayable dead letter' + ($('dead-reason').value.trim() ? ' with reason ' + $('dead-reason').value.trim() : '') + '?', 'dead-error', async () => {
    const r = await api('POST', '/v1/ops/dead-letters:replay', { reason: $('dead-reason').value.trim() });
    showError('dead-error', null);
    const why = (r.refused || []).map((x) => x.taskId + ' (' + x.reason + ': ' + x.message + ')');
    banner('Replayed ' + (r.replayed || 0) + ', skipped ' + (r.skipped || 0) + '.' + (why.length ? ' Not replayed: ' + why.join('; ') : ''));
  }));
  $('capacity-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const n = Number($('capacity').value);
    mutate('Change the slot pool capacity N to ' + n + ' for every split-worker replica?', 'slots-error', () => api('PUT', '/v1/ops/slot-pool/capacity', { capacity: n }));
  });
  $('slots-refresh').addEventListener('click', slots);
  $('pool-reset').addEventListener('click', () => mutate('Reset the slot pool to the split-workers\' configuration? Its N, fairness limits and weights replace the values operators set.', 'slots-error', () => api('POST', '/v1/ops/slot-pool:resetToConfiguration', {})));
  $('payment-form').addEventListener('submit', (ev) => payment(ev));
  $('payment-run').addEventListener('click', () => { if (shown) runCheck(shown.code); });
  $('payment-actions').addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (!shown) return;
    const v = $('pay-when').value;
    const at = v ? new Date(v) : null;
    if (!at || isNaN(at)) { showError('payments-error', new Error('checkTime: pick the new check time')); $('pay-when').focus(); return; }
    const code = shown.code;
    mutate('Move the next check of payment ' + code + ' to ' + at.toLocaleString() + '?', 'payments-error', async () => {
      await api('POST', '/v1/ops/payments/' + encodeURIComponent(code) + ':reschedule', { checkTime: at.toISOString() });
      await payment(null, code, '');
    });
  });
  $('payment-cancel').addEventListener('click', () => {
    if (!shown) return;
    const ref = shown;
    mutate('Stop reconciling payment ' + ref.code + '? It is neither closed nor marked paid.', 'payments-error', async () => {
      await api('POST', '/v1/ops/members/' + encodeURIComponent(ref.member) + '/payments/' + encodeURIComponent(ref.code) + ':cancelTracking', {});
      await payment(null, ref.code, '');
    });
  });
  $('stuck-next').addEventListener('click', () => stuck(pages.stuck));
  $('audit-refresh').addEventListener('click', () => audit(''));
  $('audit-next').addEventListener('click', () => audit(pages.audit));
  $('live').addEventListener('change', tick);

  if (token) start(); else signOut('');
})();
