// A merchant built with the WeChat Pay v3 SDK from the npm registry
// (wechatpay-axios-plugin), driven by interop_test.go.
//
//   node merchant.js provider < config.json   calls the payment simulator
//   node merchant.js notify   < config.json   sends notifications to the gateway
//
// It prints one JSON object per step ({step, status, code, body, verified,
// error}) on a line of its own; the Go test asserts on them. Every answer is
// verified: a 2xx by the SDK itself, which refuses a bad signature, and an
// error answer (which the SDK does not verify) with the SDK's own
// primitives (Rsa.verify over Formatter.response).
'use strict';

const crypto = require('node:crypto');
const {
  Wechatpay, Rsa, Aes, Formatter,
} = require('wechatpay-axios-plugin');

const MAX_CLOCK_OFFSET = 300;

function readConfig() {
  return JSON.parse(require('node:fs').readFileSync(0, 'utf8'));
}

function emit(o) { process.stdout.write(`${JSON.stringify(o)}\n`); }

function sleep(ms) { return new Promise((resolve) => { setTimeout(resolve, ms); }); }

// verifyAnswer checks an answer's Wechatpay-* headers with the SDK's
// primitives against the configured keys.
function verifyAnswer(headers, body, certs) {
  const ts = headers['wechatpay-timestamp'];
  const nonce = headers['wechatpay-nonce'];
  const serial = headers['wechatpay-serial'];
  const signature = headers['wechatpay-signature'];
  if (!ts || !nonce || !serial || !signature) { return 'headers missing'; }
  if (Math.abs(Formatter.timestamp() - Number(ts)) > MAX_CLOCK_OFFSET) { return 'timestamp out of window'; }
  if (!Object.prototype.hasOwnProperty.call(certs, serial)) { return `unknown serial ${serial}`; }
  const pub = Rsa.from(certs[serial], Rsa.KEY_TYPE_PUBLIC);
  return Rsa.verify(Formatter.response(ts, nonce, body), signature, pub) ? '' : 'signature does not verify';
}

function newClient(cfg, overrides = {}) {
  return new Wechatpay({
    mchid: cfg.mchid,
    serial: cfg.merchantSerial,
    privateKey: cfg.merchantKeyPem,
    certs: { [cfg.signingSerial]: cfg.signingPublicKeyPem },
    baseURL: cfg.baseURL,
    ...overrides,
  });
}

// call runs one SDK call and reports its outcome as a step.
async function call(step, cfg, fn) {
  const certs = { [cfg.signingSerial]: cfg.signingPublicKeyPem };
  try {
    const res = await fn({ responseType: 'text', timeout: 5000 });
    emit({
      step, status: res.status, body: res.data, verified: 'sdk',
    });
  } catch (err) {
    const res = err.response;
    if (!res || !res.status) {
      emit({ step, error: `${err.code || ''} ${err.message}` });
      return;
    }
    if (res.status >= 200 && res.status < 300) {
      // A 2xx the SDK refused: its verifier names why in err.code.
      emit({
        step, status: res.status, refusedBy: 'sdk', error: err.code, body: res.data,
      });
      return;
    }
    const body = typeof res.data === 'string' ? res.data : JSON.stringify(res.data);
    let code = '';
    try { code = JSON.parse(body).code; } catch (e) { code = ''; }
    const why = verifyAnswer(res.headers, body, certs);
    emit({
      step, status: res.status, code, body, verified: why === '' ? 'sdk-primitives' : '', error: why,
    });
  }
}

async function provider(cfg) {
  const wx = newClient(cfg);
  // The order number goes through the SDK's URL template: a chained
  // segment would be rewritten (the SDK turns camelCase into kebab-case).
  const order = (client) => client.v3.pay.transactions['out-trade-no']['{out_trade_no}'];
  const create = (no) => (c) => wx.v3.pay.transactions.native.post({
    appid: cfg.appid,
    mchid: cfg.mchid,
    description: 'interop tea',
    out_trade_no: no,
    notify_url: 'https://merchant.example/notify',
    amount: { total: 990, currency: 'CNY' },
  }, c);
  const query = (client, no, mchid = cfg.mchid) => (c) => order(client).get({ params: { mchid }, out_trade_no: no, ...c });
  const close = (no) => (c) => order(wx).close.post({ mchid: cfg.mchid }, { out_trade_no: no, ...c });
  const admin = async (path, method = 'POST', body = undefined) => {
    const res = await fetch(cfg.baseURL + path, {
      method, body: body && JSON.stringify(body), headers: { 'Content-Type': 'application/json' },
    });
    if (!res.ok) { throw new Error(`${method} ${path}: ${res.status}`); }
  };
  const [a, b, t] = [`${cfg.prefix}A`, `${cfg.prefix}B`, `${cfg.prefix}T`];

  await call('create', cfg, create(a));
  await call('create again', cfg, create(a));
  await call('create second', cfg, create(b));
  const lastCreated = Date.now(); // b's age, not a's, bounds the closes below
  await call('query unpaid', cfg, query(wx, a));
  await call('query unknown', cfg, query(wx, `${cfg.prefix}NEVER`));
  await call('close unknown', cfg, close(`${cfg.prefix}NEVER`));
  await call('close too early', cfg, close(a));

  await admin(`/admin/orders/${a}/pay?notify=false`);
  await call('query paid', cfg, query(wx, a));
  await sleep(Math.max(0, cfg.minCloseAgeMs + 200 - (Date.now() - lastCreated)));
  await call('close paid', cfg, close(a));
  await call('close unpaid', cfg, close(b));
  await call('close closed', cfg, close(b));
  await call('query closed', cfg, query(wx, b));

  const { privateKey: otherKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const forger = newClient(cfg, { privateKey: otherKey.export({ type: 'pkcs8', format: 'pem' }) });
  await call('wrong merchant key', cfg, query(forger, a));
  const otherMerchant = newClient(cfg, { mchid: '1900009999' });
  await call('wrong mchid', cfg, query(otherMerchant, a, '1900009999'));
  await call('wrong mchid in query', cfg, query(wx, a, '1900009999'));

  await call('create tampered', cfg, create(t));
  await admin(`/admin/orders/${t}/behaviour`, 'PUT', { tamper: 'signature' });
  await call('query tampered', cfg, query(wx, t));

  if (cfg.publicKeyMode) {
    await call('certificates', cfg, (c) => wx.v3.certificates.get(c));
  } else {
    await call('certificates', cfg, async (c) => {
      const res = await wx.v3.certificates.get(c);
      // The entries are sealed with the APIv3 key: open them with the
      // SDK's AesGcm and check the key is the one answers are signed with.
      const { data } = JSON.parse(res.data);
      const opened = data.map((d) => ({
        serial: d.serial_no,
        pem: Aes.AesGcm.decrypt(d.encrypt_certificate.ciphertext, cfg.apiv3Key, d.encrypt_certificate.nonce, d.encrypt_certificate.associated_data),
      }));
      const same = opened.some((o) => o.serial === cfg.signingSerial
        && Rsa.from(o.pem, Rsa.KEY_TYPE_PUBLIC).export({ type: 'spki', format: 'pem' }) === Rsa.from(cfg.signingPublicKeyPem, Rsa.KEY_TYPE_PUBLIC).export({ type: 'spki', format: 'pem' }));
      return { status: res.status, data: JSON.stringify({ entries: opened.length, sameKey: same }) };
    });
  }
}

// notification builds a TRANSACTION.SUCCESS notification with the SDK's
// primitives: the transaction sealed with AesGcm under the APIv3 key, the
// body signed with Rsa.sign over Formatter.response.
function notification(cfg, { key = cfg.platformKeyPem, id = `EV-${crypto.randomUUID()}`, tsOffset = 0, mchid = cfg.mchid } = {}) {
  const nonce = Formatter.nonce(12);
  const tx = {
    appid: cfg.appid,
    mchid,
    out_trade_no: cfg.outTradeNo,
    transaction_id: `4200${Date.now()}`,
    trade_type: 'NATIVE',
    trade_state: 'SUCCESS',
    trade_state_desc: '支付成功',
    success_time: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    amount: {
      total: cfg.amountFen, payer_total: cfg.amountFen, currency: 'CNY', payer_currency: 'CNY',
    },
  };
  const body = JSON.stringify({
    id,
    create_time: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    resource_type: 'encrypt-resource',
    event_type: 'TRANSACTION.SUCCESS',
    summary: '支付成功',
    resource: {
      original_type: 'transaction',
      algorithm: 'AEAD_AES_256_GCM',
      ciphertext: Aes.AesGcm.encrypt(JSON.stringify(tx), cfg.apiv3Key, nonce, 'transaction'),
      associated_data: 'transaction',
      nonce,
    },
  });
  const ts = String(Formatter.timestamp() + tsOffset);
  const headerNonce = Formatter.nonce();
  return {
    body,
    headers: {
      'Content-Type': 'application/json',
      'Wechatpay-Timestamp': ts,
      'Wechatpay-Nonce': headerNonce,
      'Wechatpay-Serial': cfg.signingSerial,
      'Wechatpay-Signature': Rsa.sign(Formatter.response(ts, headerNonce, body), Rsa.from(key, Rsa.KEY_TYPE_PRIVATE)),
      'Wechatpay-Signature-Type': 'WECHATPAY2-SHA256-RSA2048',
    },
  };
}

async function post(step, cfg, n) {
  const res = await fetch(cfg.notifyURL, { method: 'POST', headers: n.headers, body: n.body });
  emit({ step, status: res.status, body: await res.text() });
}

async function notify(cfg) {
  const { privateKey: forgerKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  await post('forged', cfg, notification(cfg, { key: forgerKey.export({ type: 'pkcs8', format: 'pem' }) }));
  await post('stale', cfg, notification(cfg, { tsOffset: -(MAX_CLOCK_OFFSET + 60) }));
  await post('wrong merchant', cfg, notification(cfg, { mchid: '1900009999' }));
  const genuine = notification(cfg);
  await post('genuine', cfg, genuine);
  await post('replayed', cfg, genuine);
}

const commands = { provider, notify };
const command = commands[process.argv[2]];
if (!command) {
  process.stderr.write('usage: node merchant.js provider|notify < config.json\n');
  process.exit(2);
}
command(readConfig()).catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
