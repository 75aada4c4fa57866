'use strict';
// The page's DOM helpers, shared by app.js, search.js and workflows.js.
// Everything the page shows may be user data: elements are built with
// createElement and filled with textContent only, never from HTML strings.
(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);
  // el('td', {className: 'x', dataset: {col: 'ready'}}, 'text', childNode)
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k === 'className' || k === 'title' || k === 'type' || k === 'disabled' || k === 'hidden') e[k] = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) append(e, c);
    return e;
  }
  function append(parent, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) child.forEach((c) => append(parent, c));
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function table(id, headers, rows) {
    const t = $(id);
    t.replaceChildren(el('thead', null, el('tr', null, headers.map((h) => el('th', null, h)))), el('tbody', null, rows));
    t.hidden = rows.length === 0;
  }

  // PostgreSQL interval text ("00:00:15.27546", "1 day 02:00:00") as words.
  function interval(text) {
    if (text === null || text === undefined) return '';
    const m = /^(-)?(\d+):(\d\d):(\d\d(?:\.\d+)?)$/.exec(text);
    if (!m) return text;
    return duration((m[1] ? -1 : 1) * (Number(m[2]) * 3600 + Number(m[3]) * 60 + Number(m[4])));
  }
  function duration(seconds) {
    const s = Math.abs(seconds);
    const sign = seconds < 0 ? '-' : '';
    if (s < 10) return `${sign}${s.toFixed(1)} s`;
    if (s < 120) return `${sign}${Math.round(s)} s`;
    if (s < 7200) return `${sign}${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    return `${sign}${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  }
  function time(value) {
    if (!value) return '';
    const d = new Date(value);
    return Number.isNaN(d.getTime()) ? String(value) : d.toLocaleTimeString();
  }
  function value(v) {
    if (v === null || v === undefined) return '—';
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (Array.isArray(v)) return v.join(', ');
    if (typeof v === 'string' && /^-?\d+:\d\d:\d\d/.test(v)) return interval(v);
    return String(v);
  }
  function payload(row) {
    return el('code', { className: 'payload', title: row.payload_cut ? 'cut: the payload is longer' : null },
      row.payload, row.payload_cut ? ' …' : null);
  }

  window.dashboardUI = { $, el, append, svg, table, interval, duration, time, value, payload };
})();
