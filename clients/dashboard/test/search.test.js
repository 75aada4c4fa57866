'use strict';
// Search, bulk actions, authentication, the server-kept charts, workflows
// and counters, and the layout, in headless Chromium against a real server
// (test/run.sh: preloaded, queue counts sampled every second).
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { test, before, after } = require('node:test');
const pg = require('pg');
const h = require('./helpers');

const SHOTS = process.env.SCREENSHOT_DIR || null;
const TOKEN = 'a-token-of-this-test-0123456789';
let db;
let browser;
const started = [];

async function dashboard(args, env) {
  const d = await h.startDashboard(['--database', h.databaseUrl('postgres'), '--refresh', '1', '--sample', '1', ...args], undefined, env);
  started.push(d);
  return d;
}

async function shot(page, name, selector) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name);
  if (selector) await page.locator(selector).screenshot({ path: file });
  else await page.screenshot({ path: file });
}

// Makes `n` tasks of queue `queue` dead with the error `error`.
async function dead(queue, payloads, error) {
  const ids = [];
  for (const p of payloads) {
    const id = (await db.query('SELECT concurrency.enqueue($1, $2) AS id', [queue, p])).rows[0].id;
    const t = (await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1)', [queue])).rows[0];
    assert.equal(t.task_id, id);
    await db.query('SELECT concurrency.fail($1, $2, $3, $4)', [queue, id, t.lease_token, error]);
    ids.push(String(id));
  }
  return ids;
}

before(async () => {
  db = h.admin();
  await db.connect();
  await db.query('CREATE EXTENSION IF NOT EXISTS concurrency_ext');
  await db.query("SELECT concurrency.create_queue('search_jobs', max_attempts => 1)");
  await db.query("SELECT concurrency.create_queue('search_other', max_attempts => 1)");
  browser = await h.launchBrowser();
});

after(async () => {
  if (browser) await browser.close();
  for (const d of started) await d.stop();
  if (db) await db.end();
});

// What the page's search finds, every page followed, as ids
async function searchAll(page, filter) {
  await page.selectOption('#search-queue', filter.queue);
  await page.selectOption('#search-state', filter.state || '');
  await page.fill('#search-payload', filter.payload || '');
  await page.fill('#search-error', filter.error || '');
  const found = [];
  let before = await page.evaluate(() => window.__searches || 0);
  await page.evaluate(() => {
    if (window.__searches !== undefined) return;
    const note = document.getElementById('search-note');
    window.__searches = 0;
    new MutationObserver(() => { if (!/Searching/.test(note.textContent)) window.__searches += 1; })
      .observe(note, { childList: true, characterData: true, subtree: true });
  });
  await page.click('#search-go');
  for (;;) {
    await page.waitForFunction((n) => window.__searches > n, before);
    before = await page.evaluate(() => window.__searches);
    found.push(...await page.$$eval('#search-table tbody tr', (rows) => rows.map((r) => r.dataset.task)));
    if (!(await page.locator('#search-older').isVisible())) break;
    await page.click('#search-older');
  }
  return { ids: found, count: Number(await page.locator('#search-count').textContent()) };
}

test('search finds what the SQL finds: state, payload containment, error text with LIKE wildcards, paged past 50', async () => {
  const pays = Array.from({ length: 60 }, (_, i) => ({ customer: i % 3, n: i, tags: ['a', i % 2 ? 'odd' : 'even'] }));
  await dead('search_jobs', pays.slice(0, 55), 'timeout after 30 s');
  await dead('search_jobs', pays.slice(55), '100% full_disk \\ no');
  for (const p of pays.slice(0, 7)) await db.query("SELECT concurrency.enqueue('search_jobs', $1)", [p]);
  const d = await dashboard(['--allow-actions']);
  const page = await h.openPage(browser, d.url);
  const cases = [
    [{ queue: 'search_jobs' }, 'TRUE', []],
    [{ queue: 'search_jobs', state: 'dead' }, "state = 'dead'", []],
    [{ queue: 'search_jobs', payload: '{"customer": 1}' }, 'payload @> $1', [{ customer: 1 }]],
    [{ queue: 'search_jobs', payload: '{"tags": ["odd"]}', state: 'ready' }, "payload @> $1 AND state = 'ready'", [{ tags: ['odd'] }]],
    [{ queue: 'search_jobs', error: 'TIMEOUT' }, "last_error ILIKE '%timeout%'", []],
    [{ queue: 'search_jobs', error: '0% full_d' }, "strpos(lower(last_error), '0% full_d') > 0", []],
    [{ queue: 'search_jobs', error: '%' }, "strpos(last_error, '%') > 0", []],
    [{ queue: 'search_jobs', error: '_' }, "strpos(last_error, '_') > 0", []],
    [{ queue: 'search_jobs', error: '\\' }, "strpos(last_error, '\\') > 0", []],
  ];
  for (const [filter, where, params] of cases) {
    const sql = await db.query(`SELECT id FROM concurrency.q_search_jobs WHERE ${where} ORDER BY id DESC`, params);
    const want = sql.rows.map((r) => String(r.id));
    const got = await searchAll(page, filter);
    assert.deepEqual(got.ids, want, JSON.stringify(filter));
    assert.equal(got.count, want.length, `count of ${JSON.stringify(filter)}`);
  }
  assert.ok((await db.query("SELECT count(*)::int AS n FROM concurrency.q_search_jobs WHERE state = 'dead'")).rows[0].n > 50);
  // invalid JSON: a clear 400, from the server
  const res = await fetch(new URL('/api/tasks?queue=search_jobs&payload=%7Bnope', d.url));
  assert.equal(res.status, 400);
  assert.match((await res.json()).error.message, /payload is not valid JSON/);
  await page.selectOption('#search-queue', 'search_jobs');
  await page.fill('#search-payload', '{"customer": 2}');
  await page.fill('#search-error', '');
  await page.selectOption('#search-state', 'dead');
  await page.click('#search-go');
  await page.locator('#search-table tbody tr').first().waitFor();
  await shot(page, 'dashboard-search.png', '#search');
  assert.deepEqual(page.consoleErrors, []);
});

test('a bulk retry revives exactly the dead tasks the search found, after a confirmation; a changed set is refused', async () => {
  const target = await dead('search_other', [{ batch: 'x', k: 1 }, { batch: 'x', k: 2 }, { batch: 'x', k: 3 }], 'smtp 451');
  const others = await dead('search_other', [{ batch: 'y' }, { batch: 'x', k: 4 }], 'other error');
  const d = await dashboard(['--allow-actions']);
  const page = await h.openPage(browser, d.url);
  await searchAll(page, { queue: 'search_other', payload: '{"batch": "x"}', error: 'smtp' });
  assert.equal(await page.locator('#bulk-retry').textContent(), 'Retry the 3 dead…');
  await page.click('#bulk-retry');
  await page.locator('#bulk-confirm').waitFor();
  assert.match(await page.locator('#bulk-question').textContent(), /^Retry 3 tasks of queue search_other/);
  await shot(page, 'dashboard-bulk.png', '#search');
  // nothing changes before the confirmation
  const states = async () => Object.fromEntries((await db.query('SELECT id::text, state FROM concurrency.q_search_other')).rows.map((r) => [r.id, r.state]));
  assert.ok(Object.values(await states()).every((s) => s === 'dead'));
  await page.click('#bulk-yes');
  await h.until(async () => /retry: 3 of 3 tasks changed/.test(await page.locator('#bulk-result').textContent()), 'the bulk retry');
  const after = await states();
  for (const id of target) assert.equal(after[id], 'ready', `task ${id} revived`);
  for (const id of others) assert.equal(after[id], 'dead', `task ${id} untouched`);
  // a preview, then the set changes: the action is refused and changes nothing
  const post = (p, body) => page.evaluate(async ({ p, body }) => {
    const token = document.querySelector('meta[name="csrf-token"]').content;
    const r = await fetch(p, { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': token }, body: JSON.stringify(body) });
    return { status: r.status, body: await r.json() };
  }, { p, body });
  const filter = { queue: 'search_other', state: 'dead' };
  const preview = await post('/api/bulk/preview', { action: 'retry', filter });
  assert.equal(preview.body.count, 2);
  await db.query("SELECT concurrency.cancel('search_other', $1)", [[others[0]]]);
  const refused = await post('/api/bulk', { action: 'retry', filter, count: preview.body.count, digest: preview.body.digest });
  assert.equal(refused.status, 409);
  assert.match(refused.body.error.message, /changed since they were counted/);
  assert.equal((await states())[others[1]], 'dead', 'nothing retried');
  // without --allow-actions: refused
  const ro = await dashboard([]);
  const roPage = await h.openPage(browser, ro.url);
  assert.equal(await roPage.locator('#search-bulk').isVisible(), false);
  const res = await roPage.evaluate(async () => (await fetch('/api/bulk/preview', { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': document.querySelector('meta[name="csrf-token"]').content }, body: '{}' })).status);
  assert.equal(res, 403);
});

test('authentication: 401 without the token or the basic credentials, 200 with them; a configured public host', async () => {
  const t = await dashboard(['--token', TOKEN, '--public-host', 'queues.example.org']);
  for (const p of ['/', '/app.js', '/api/state', '/api/tasks?queue=search_jobs']) {
    const res = await fetch(new URL(p, t.url));
    assert.equal(res.status, 401, p);
    assert.match(res.headers.get('www-authenticate'), /^Bearer/);
  }
  assert.equal((await fetch(new URL('/api/state', t.url), { headers: { Authorization: 'Bearer wrong-token-wrong-token' } })).status, 401);
  assert.equal((await fetch(new URL('/api/state', t.url), { headers: { Authorization: `Bearer ${TOKEN}` } })).status, 200);
  // the host a reverse proxy forwards, and no other
  const http = require('node:http');
  const get = (host) => new Promise((resolve, reject) => {
    const u = new URL(t.url);
    http.get({ host: '127.0.0.1', port: u.port, path: '/api/state', headers: { Host: host, Authorization: `Bearer ${TOKEN}` } },
      (r) => { r.resume(); resolve(r.statusCode); }).on('error', reject);
  });
  assert.equal(await get('queues.example.org'), 200);
  assert.equal(await get('evil.example.org'), 421);
  // a browser: ?token= once, then a cookie
  const page = await h.openPage(browser, `${t.url}?token=${TOKEN}`);
  assert.equal((await page.evaluate(async () => (await fetch('/api/state')).status)), 200);

  const b = await dashboard(['--user', 'ops'], { CONCURRENCY_DASHBOARD_PASSWORD: 'basic-secret' });
  const none = await fetch(new URL('/api/state', b.url));
  assert.equal(none.status, 401);
  assert.match(none.headers.get('www-authenticate'), /^Basic realm=/);
  const basic = (u, p) => ({ Authorization: `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}` });
  assert.equal((await fetch(new URL('/api/state', b.url), { headers: basic('ops', 'wrong') })).status, 401);
  assert.equal((await fetch(new URL('/api/state', b.url), { headers: basic('ops', 'basic-secret') })).status, 200);
  const bpage = await h.openPage(browser, b.url, { httpCredentials: { username: 'ops', password: 'basic-secret' } });
  assert.ok(await bpage.evaluate(() => window.dashboard.state.queues.length > 0));
  // a user without a password does not start
  await assert.rejects(h.startDashboard(['--database', h.databaseUrl('postgres'), '--user', 'ops']), /exited with 2/);
});

test('charts come from the samples the server keeps: a reload and a restart of the dashboard show them', async () => {
  await h.until(async () => (await db.query("SELECT count(DISTINCT sampled_at)::int AS n FROM concurrency.queue_stats_history WHERE queue = 'search_jobs'")).rows[0].n >= 3, 'three samples by the server', 30000);
  const d = await dashboard([]);
  const page = await h.openPage(browser, d.url);
  const first = await page.evaluate(() => window.dashboard.state.throughput);
  assert.equal(first.source, 'server');
  assert.ok(first.samples >= 3, `${first.samples} samples at the first load`);
  assert.match(await page.locator('#throughput-note').textContent(), /samples that the server keeps/);
  // the x axis spans the samples from the first draw
  const axis = await page.evaluate(() => {
    const t = window.dashboard.state.throughput;
    return { times: [t.times[0], t.times[t.times.length - 1]], labels: [...document.querySelectorAll('#chart-finished .u-axis')].map((a) => a.textContent).join(' ') };
  });
  assert.doesNotMatch(axis.labels, /20[3-9][0-9]|Mar|Sep/, 'no axis of years');
  await d.stop();
  const again = await dashboard([]);
  const page2 = await h.openPage(browser, again.url);
  const second = await page2.evaluate(() => window.dashboard.state.throughput);
  assert.equal(second.source, 'server');
  assert.ok(second.samples >= first.samples, 'a restarted dashboard shows the samples from before its start');
  assert.ok(second.times[0] <= first.times[0] + 1e-3);
  await page2.reload();
  await h.waitForUpdate(page2);
  assert.ok((await page2.evaluate(() => window.dashboard.state.throughput.samples)) >= second.samples);
  await shot(page2, 'dashboard-throughput-history.png', '#throughput');
});

test('where the server keeps no samples (sampling off in that database), the dashboard samples itself and says so', async () => {
  await db.query('DROP DATABASE IF EXISTS dash_unsampled');
  await db.query('CREATE DATABASE dash_unsampled');
  await db.query('ALTER DATABASE dash_unsampled SET concurrency.stats_history_interval = 0');
  const other = new pg.Client({ database: 'dash_unsampled' });
  await other.connect();
  try {
    await other.query('CREATE EXTENSION concurrency_ext');
    await other.query("SELECT concurrency.create_queue('unsampled')");
    const url = h.databaseUrl('postgres').replace(/@\/[^?]*\?/, '@/dash_unsampled?');
    const d = await h.startDashboard(['--database', url, '--refresh', '1', '--sample', '1']);
    started.push(d);
    const page = await h.openPage(browser, d.url);
    await page.waitForFunction(() => window.dashboard.state.throughput.samples >= 2, null, { timeout: 20000 });
    assert.equal(await page.evaluate(() => window.dashboard.state.throughput.source), 'dashboard');
    assert.match(await page.locator('#throughput-note').textContent(), /The server keeps no samples here/);
    assert.equal((await other.query('SELECT count(*)::int AS n FROM concurrency.queue_stats_sample')).rows[0].n, 0);
    await d.stop();
  } finally {
    await other.end();
  }
});

test('workflows: sleeping and awaiting tasks with their steps; counters; the page fits 1280 px; a loading state', async () => {
  await db.query("SELECT concurrency.create_queue('search_flows')");
  const id1 = (await db.query("SELECT concurrency.enqueue('search_flows', '{\"order\": 1}') AS id")).rows[0].id;
  let t = (await db.query("SELECT task_id, lease_token FROM concurrency.dequeue('search_flows')")).rows[0];
  await db.query("SELECT concurrency.record_step('search_flows', $1, $2, 'charge', '{\"ok\": true}')", [t.task_id, t.lease_token]);
  await db.query("SELECT concurrency.sleep_task_for('search_flows', $1, $2, interval '1 hour')", [t.task_id, t.lease_token]);
  const id2 = (await db.query("SELECT concurrency.enqueue('search_flows', '{\"order\": 2}') AS id")).rows[0].id;
  t = (await db.query("SELECT task_id, lease_token FROM concurrency.dequeue('search_flows')")).rows[0];
  assert.equal(t.task_id, id2);
  await db.query("SELECT concurrency.await_event('search_flows', $1, $2, 'payment-<b>42</b>', interval '1 hour')", [t.task_id, t.lease_token]);
  await db.query("SELECT concurrency.create_counter('search_stock', min_value => 0)");
  await db.query("SELECT concurrency.counter_add('search_stock', 17)");
  const d = await dashboard([]);
  const page = await h.openPage(browser, d.url);
  const row = (id) => page.locator(`#workflow-table tr[data-queue="search_flows"][data-task="${id}"]`);
  assert.equal(await row(id1).getAttribute('data-waits'), 'sleeping');
  assert.equal(await row(id2).getAttribute('data-waits'), 'awaiting');
  assert.equal(await row(id2).locator('td[data-col="event"]').textContent(), 'payment-<b>42</b>');
  await row(id1).locator('button.steps').click();
  await page.locator('#steps-table tr[data-step="charge"]').waitFor();
  const steps = (await db.query("SELECT step, result::text FROM concurrency.task_steps('search_flows', $1)", [id1])).rows;
  assert.deepEqual(await page.$$eval('#steps-table tbody tr', (rs) => rs.map((r) => ({ step: r.children[0].textContent, result: r.children[1].textContent }))), steps);
  const value = (await db.query("SELECT value::text FROM concurrency.counters WHERE name = 'search_stock'")).rows[0].value;
  assert.equal(await page.locator('#counters-table tr[data-counter="search_stock"] td[data-col="value"]').textContent(), value);
  await shot(page, 'dashboard-workflows.png', '#workflows');
  // nothing wider than the window at 1280 px
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no horizontal scroll at 1280 px');
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot(page, 'dashboard-1280.png');
  // before the first state arrives: "Loading…", no empty-section message
  const slow = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  let release;
  const held = new Promise((r) => { release = r; });
  await slow.route('**/api/state', async (route) => { await held; await route.continue(); });
  await slow.goto(d.url);
  await slow.locator('#loading').waitFor({ state: 'visible' });
  assert.equal(await slow.locator('#locks-empty').isVisible(), false);
  assert.equal(await slow.locator('#queues').isVisible(), false);
  release();
  await slow.locator('#queues').waitFor({ state: 'visible' });
  assert.equal(await slow.locator('#loading').isVisible(), false);
  await slow.close();
});

test('the lock graph of six sessions is readable at 1280×800: no label overlaps another, text at least 10 px', async () => {
  await db.query('CREATE TABLE search_accounts (id int PRIMARY KEY, balance int)');
  await db.query('INSERT INTO search_accounts VALUES (1, 0)');
  const sessions = [];
  const pending = [];
  try {
    for (let i = 0; i < 6; i++) {
      const c = new pg.Client({ database: process.env.PGDATABASE || 'postgres', application_name: `app-${i}` });
      await c.connect();
      c.pid = (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p;
      sessions.push(c);
    }
    await sessions[0].query('BEGIN');
    await sessions[0].query('UPDATE search_accounts SET balance = balance + 1 WHERE id = 1');
    for (const c of sessions.slice(1)) pending.push(c.query('UPDATE search_accounts SET balance = balance + 1 WHERE id = 1').catch(() => {}));
    await h.until(async () => (await db.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1) AND wait_event_type = 'Lock'", [sessions.slice(1).map((c) => c.pid)])).rows[0].n === 5, 'five waiters');
    const d = await dashboard([]);
    const page = await h.openPage(browser, d.url);
    await page.waitForFunction(() => window.dashboard.cy && window.dashboard.cy.nodes().length === 6, null, { timeout: 20000 });
    const boxes = await page.evaluate(() => {
      const cy = window.dashboard.cy;
      return { zoom: cy.zoom(), nodes: cy.nodes().map((n) => n.renderedBoundingBox({ includeLabels: true, includeOverlays: false })) };
    });
    assert.ok(boxes.zoom * 13 >= 10, `labels drawn at ${boxes.zoom * 13} px`);
    for (let i = 0; i < boxes.nodes.length; i++) {
      for (let j = i + 1; j < boxes.nodes.length; j++) {
        const a = boxes.nodes[i];
        const b = boxes.nodes[j];
        const overlap = a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
        assert.ok(!overlap, `nodes ${i} and ${j} overlap`);
      }
    }
    await page.locator('#locks').scrollIntoViewIfNeeded();
    await shot(page, 'dashboard-lock-graph-six.png', '#locks');
    await sessions[0].query('ROLLBACK');
    await Promise.all(pending);
  } finally {
    for (const c of sessions) await c.end().catch(() => {});
    await db.query('DROP TABLE IF EXISTS search_accounts');
  }
});
