// orderflow API reader: renders /openapi.json (OpenAPI 2 or 3) as a list
// of operations (method, path, parameters, request body, responses) and
// schemas. No dependencies.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);
  const el = (tag, attrs = {}, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  };
  const METHODS = ['get', 'post', 'put', 'patch', 'delete'];
  const slug = (s) => s.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-|-$/g, '').toLowerCase();

  let doc = null;
  const refName = (ref) => ref.split('/').pop();
  const schemas = () => doc.definitions || (doc.components && doc.components.schemas) || {};

  /** typeOf renders a schema's type as text and links to named schemas. */
  function typeOf(s) {
    if (!s) return el('span', { class: 'type', text: 'any' });
    if (s.$ref) {
      const n = refName(s.$ref);
      return el('a', { class: 'type', href: `#schema-${slug(n)}`, text: n });
    }
    if (s.type === 'array') return el('span', { class: 'type' }, typeOf(s.items), '[]');
    if (s.type === 'object' && s.additionalProperties) return el('span', { class: 'type' }, 'map<string, ', typeOf(s.additionalProperties), '>');
    let t = s.type || 'object';
    if (s.format) t += ` (${s.format})`;
    if (s.enum) t += ` enum`;
    return el('span', { class: 'type', text: t });
  }

  const paragraphs = (text) => (text || '').split(/\n{2,}/).map((p) => el('p', { text: p.replace(/\n/g, ' ') }));

  function paramTable(params) {
    if (!params.length) return null;
    return el('table', { class: 'grid' },
      el('thead', {}, el('tr', {}, ...['Name', 'In', 'Type', 'Required', 'Description'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...params.map((p) => el('tr', {},
        el('td', {}, el('code', { text: p.name })),
        el('td', { text: p.in }),
        el('td', {}, typeOf(p.schema || p)),
        el('td', { text: p.required ? 'yes' : 'no' }),
        el('td', { text: (p.description || '').replace(/\n/g, ' ') }),
      ))));
  }

  function responsesTable(responses) {
    const rows = Object.entries(responses || {});
    if (!rows.length) return null;
    return el('table', { class: 'grid' },
      el('thead', {}, el('tr', {}, ...['Status', 'Description', 'Body'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows.map(([code, ref]) => {
        // OpenAPI 3 shares error answers under components.responses.
        const r = ref.$ref ? ((doc.components && doc.components.responses) || {})[refName(ref.$ref)] || ref : ref;
        let schema = r.schema;
        if (!schema && r.content) {
          const first = Object.values(r.content)[0];
          schema = first && first.schema;
        }
        return el('tr', {},
          el('td', {}, el('code', { text: code })),
          el('td', { text: (r.description || '').replace(/\n/g, ' ') }),
          el('td', {}, schema ? typeOf(schema) : '—'));
      })));
  }

  function operation(path, method, op) {
    const params = [...(doc.paths[path].parameters || []), ...(op.parameters || [])];
    const id = `op-${slug(method + ' ' + path)}`;
    const body = op.requestBody && op.requestBody.content
      ? Object.values(op.requestBody.content)[0] : null;
    return el('article', { class: 'op', id, 'aria-labelledby': `${id}-h` },
      el('header', {},
        el('span', { class: `method ${method}`, text: method.toUpperCase() }),
        el('h3', { id: `${id}-h`, text: path }),
        op.operationId ? el('span', { class: 'muted', text: op.operationId.replace('_', '.') }) : null),
      el('div', { class: 'body' },
        ...paragraphs(op.summary),
        ...paragraphs(op.description),
        params.length ? el('h4', { text: 'Parameters' }) : null,
        paramTable(params),
        body ? el('h4', { text: 'Request body' }) : null,
        body ? el('p', {}, typeOf(body.schema)) : null,
        el('h4', { text: 'Responses' }),
        responsesTable(op.responses)));
  }

  function schemaBlock(name, s) {
    const props = Object.entries(s.properties || {});
    const required = new Set(s.required || []);
    return el('section', { class: 'schema', id: `schema-${slug(name)}`, 'aria-labelledby': `schema-${slug(name)}-h` },
      el('h3', { id: `schema-${slug(name)}-h`, text: name }),
      ...paragraphs(s.description || s.title),
      s.enum ? el('p', {}, 'One of: ', ...s.enum.flatMap((v, i) => [i ? ', ' : '', el('code', { text: String(v) })])) : null,
      props.length ? el('table', { class: 'grid' },
        el('thead', {}, el('tr', {}, ...['Field', 'Type', 'Description'].map((h) => el('th', { scope: 'col', text: h })))),
        el('tbody', {}, ...props.map(([pn, ps]) => el('tr', {},
          el('td', {}, el('code', { text: pn }), required.has(pn) ? ' *' : ''),
          el('td', {}, typeOf(ps)),
          el('td', { text: (ps.description || ps.title || '').replace(/\n/g, ' ') }))))) : null);
  }

  function render() {
    const info = doc.info || {};
    $('#doc-title').textContent = info.title || 'REST API';
    $('#doc-version').textContent = info.version || '';
    document.title = `${info.title || 'REST API'} · orderflow`;
    if (info.description) $('#doc-intro').replaceChildren(...paragraphs(info.description).flatMap((p) => [...p.childNodes]),
      ' ', el('a', { href: '/openapi.json', text: 'Raw document' }), '.');

    // Group operations by tag, in the document's tag order.
    const groups = new Map();
    for (const t of doc.tags || []) groups.set(t.name, { desc: t.description, ops: [] });
    for (const [path, item] of Object.entries(doc.paths || {})) {
      for (const m of METHODS) {
        if (!item[m]) continue;
        const tag = (item[m].tags || ['Other'])[0];
        if (!groups.has(tag)) groups.set(tag, { desc: '', ops: [] });
        groups.get(tag).ops.push([path, m, item[m]]);
      }
    }
    const out = [];
    const toc = [el('h2', { text: 'Operations' })];
    const tocList = el('ul');
    for (const [tag, g] of groups) {
      if (!g.ops.length) continue;
      out.push(el('h2', { id: `tag-${slug(tag)}`, text: tag }), ...paragraphs(g.desc));
      for (const [path, m, op] of g.ops) {
        out.push(operation(path, m, op));
        tocList.append(el('li', {}, el('a', { href: `#op-${slug(m + ' ' + path)}` },
          el('strong', { text: m.toUpperCase() }), ' ', el('span', { class: 'path', text: path }))));
      }
    }
    toc.push(tocList, el('h2', { text: 'Schemas' }));
    const schemaList = el('ul');
    out.push(el('h2', { id: 'schemas', text: 'Schemas' }));
    for (const [name, s] of Object.entries(schemas()).sort(([a], [b]) => a.localeCompare(b))) {
      out.push(schemaBlock(name, s));
      schemaList.append(el('li', {}, el('a', { href: `#schema-${slug(name)}`, text: name })));
    }
    toc.push(schemaList);
    $('#toc').replaceChildren(...toc);
    $('#doc').replaceChildren(...out);
    if (location.hash) {
      const target = document.getElementById(location.hash.slice(1));
      if (target) target.scrollIntoView();
    }
  }

  fetch('/openapi.json', { headers: { Accept: 'application/json' } })
    .then((r) => {
      if (!r.ok) throw new Error(`GET /openapi.json answered HTTP ${r.status}`);
      return r.json();
    })
    .then((d) => { doc = d; render(); })
    .catch((err) => {
      const e = $('#doc-error');
      e.textContent = `Could not load the API document: ${err.message}`;
      e.hidden = false;
      $('#doc').replaceChildren();
    });
})();
