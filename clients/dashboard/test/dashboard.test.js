'use strict';
// The dashboard in headless Chromium against a real server (test/run.sh
// starts the cluster, with the lock history sampled every 100 ms): counts,
// payloads shown as text, retry, cancel, pause and resume with and without --allow-actions
// and manage, the request guards, the lock graph of a pile-up, the lock
// history, throughput, and the columns and views found only where they exist.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { test, before, after } = require('node:test');
const pg = require('pg');
const h = require('./helpers');

const OPS_PASSWORD = 'ops-Pa55word-never-on-the-page';
const SCRIPT_PAYLOAD = { html: '<script>window.__injected = 1</script><img src=x onerror="window.__injected = 2">' };
const ODD_QUEUE = 'odd"q"<b>&amp;</b>';
const SHOTS = process.env.SCREENSHOT_DIR || null;

let db;
let browser;
const started = [];
const ids = {};

async function dashboard(role, password, ...args) {
  const d = await h.startDashboard(['--database', h.databaseUrl(role, password), '--refresh', '1', '--sample', '1', ...args]);
  started.push(d);
  return d;
}

async function as(role, sql, params) {
  await db.query(`SET ROLE ${pg.escapeIdentifier(role)}`);
  try {
    return await db.query(sql, params);
  } finally {
    await db.query('RESET ROLE');
  }
}

// Makes a task dead: claimed and failed on a queue with one attempt.
async function deadTask(queue, payload, error) {
  const id = (await db.query('SELECT concurrency.enqueue($1, $2) AS id', [queue, payload])).rows[0].id;
  const t = (await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1)', [queue])).rows[0];
  assert.equal(t.task_id, id);
  assert.equal((await db.query('SELECT concurrency.fail($1, $2, $3, $4) AS s', [queue, id, t.lease_token, error])).rows[0].s, 'dead');
  return id;
}

async function taskState(queue, id) {
  return (await db.query('SELECT state, attempt FROM concurrency.task_status($1, $2)', [queue, id])).rows[0];
}

async function shot(page, name, selector) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name);
  if (selector) await page.locator(selector).screenshot({ path: file });
  else await page.screenshot({ path: file, fullPage: true });
}

before(async () => {
  db = h.admin();
  await db.connect();
  await db.query('CREATE EXTENSION IF NOT EXISTS concurrency_ext');
  for (const role of ['dash_ops', 'dash_viewer', 'dash_monitor']) {
    await db.query(`DROP ROLE IF EXISTS ${role}`).catch(() => {});
  }
  await db.query(`CREATE ROLE dash_ops LOGIN PASSWORD '${OPS_PASSWORD}' IN ROLE pg_read_all_stats`);
  await db.query('CREATE ROLE dash_viewer LOGIN');
  await db.query('CREATE ROLE dash_monitor LOGIN IN ROLE concurrency_monitor');
  await db.query("SELECT concurrency.create_queue('emails', max_attempts => 1)");
  await db.query("SELECT concurrency.create_queue('reports', lease => '1 hour', key_limit => 2, max_leased => 4)");
  await db.query("SELECT concurrency.create_queue('private')");
  await db.query('SELECT concurrency.create_queue($1, max_attempts => 1)', [ODD_QUEUE]);
  await db.query('SELECT concurrency.create_queue($1)', ['throughput']);
  for (const q of ['emails', 'reports', ODD_QUEUE, 'throughput']) {
    await db.query("SELECT concurrency.grant_queue($1, 'dash_ops', '{read,manage}')", [q]);
    await db.query("SELECT concurrency.grant_queue($1, 'dash_viewer', '{read}')", [q]);
  }
  // emails: dead tasks (one with a hostile payload), ready and scheduled ones
  ids.scriptTask = await deadTask('emails', SCRIPT_PAYLOAD, 'smtp said <b>no</b>');
  ids.retryTask = await deadTask('emails', { to: 'ana@example.org' }, 'connection refused');
  ids.cancelTask = await deadTask('emails', { to: 'bo@example.org' }, 'mailbox full');
  ids.refusedTask = await deadTask('emails', { to: 'cy@example.org' }, 'timeout');
  await db.query("SELECT concurrency.enqueue('emails', '{\"to\": \"di@example.org\"}')");
  await db.query("SELECT concurrency.enqueue('emails', '{}', run_at => now() + interval '1 hour')");
  await deadTask(ODD_QUEUE, { note: 'a queue whose name is markup' }, 'odd');
  // reports: keyed tasks, two running (one reporting progress where the column exists)
  for (let i = 0; i < 5; i++) {
    await db.query("SELECT concurrency.enqueue('reports', $1, concurrency_key => 'customer-1')", [{ report: i }]);
  }
  ids.reportLeases = (await db.query("SELECT task_id, lease_token FROM concurrency.dequeue('reports', batch => 2, worker => 'report-worker-1')")).rows;
  // a failed task waiting for its retry
  const r = (await db.query("SELECT concurrency.enqueue('private', '{\"n\": 1}') AS id")).rows[0].id;
  const l = (await db.query("SELECT lease_token FROM concurrency.dequeue('private')")).rows[0].lease_token;
  await db.query("SELECT concurrency.fail('private', $1, $2, 'try later', retry_in => '1 hour')", [r, l]);
  browser = await h.launchBrowser();
});

after(async () => {
  if (browser) await browser.close();
  for (const d of started) await d.stop();
  if (db) await db.end();
});

test("the page's counts equal queue_stats, for the dashboard's role", async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  const page = await h.openPage(browser, d.url);
  const stats = await as('dash_ops', 'SELECT * FROM concurrency.queue_stats ORDER BY queue');
  const counts = stats.fields.filter((f) => f.dataTypeID === 20).map((f) => f.name);
  assert.ok(counts.includes('ready') && counts.includes('dead') && counts.includes('blocked'));
  await shot(page, 'dashboard.png');
  for (const row of stats.rows) {
    const cells = await page.evaluate(({ queue, cols }) => {
      const tr = [...document.querySelectorAll('#queues-table tbody tr')].find((r) => r.dataset.queue === queue);
      return tr ? Object.fromEntries(cols.map((c) => [c, tr.querySelector(`td[data-col="${c}"]`).textContent])) : null;
    }, { queue: row.queue, cols: counts });
    assert.ok(cells, `a row for queue ${row.queue}`);
    for (const c of counts) {
      // NULL (no permission read on that queue) shows as a dash
      assert.equal(cells[c], row[c] === null ? '—' : String(row[c]), `${row.queue}.${c}`);
    }
  }
  const priv = stats.rows.find((r) => r.queue === 'private');
  assert.equal(priv.ready, null, 'dash_ops has no read on queue private');
  const emails = stats.rows.find((r) => r.queue === 'emails');
  assert.equal(emails.dead, '4');
  assert.equal(emails.ready, '1');
  assert.equal(emails.scheduled, '1');
  // settings from concurrency.queue, as they exist
  const setting = await page.locator('#settings-table tr[data-queue="reports"] td[data-col="key_limit"]').textContent();
  assert.equal(setting, '2');
  // the retrying task of queue private is not readable by dash_ops: not listed
  assert.equal(await page.locator('#failed-table tr[data-queue="private"]').count(), 0);
  assert.deepEqual(page.consoleErrors, []);
});

test('a member of concurrency_monitor sees every count, and lists no task (no SELECT on the tables)', async () => {
  const d = await dashboard('dash_monitor', null, '--allow-actions');
  const page = await h.openPage(browser, d.url);
  const stats = await as('dash_monitor', 'SELECT queue, ready, dead FROM concurrency.queue_stats ORDER BY queue');
  assert.ok(stats.rows.every((r) => r.ready !== null), 'read on every queue');
  for (const row of stats.rows) {
    const tr = page.locator('#queues-table tbody tr').filter({ has: page.locator('th', { hasText: row.queue }) });
    assert.equal(await tr.first().locator('td[data-col="dead"]').textContent(), row.dead, `${row.queue}.dead`);
  }
  assert.equal(await page.locator('#failed-table tbody tr').count(), 0);
  assert.equal(await page.locator('#running-table tbody tr').count(), 0);
  assert.match(await page.locator('#failed-unlisted').textContent(), /not listed .*emails/);
  assert.equal(await page.locator('button.action').count(), 0, 'no manage: no buttons');
  assert.equal(await page.locator('#tasks-error').isVisible(), false);
  assert.deepEqual(page.consoleErrors, []);
});

test('npx concurrency-ext dashboard (the worker runtime\'s command) runs the same dashboard', async () => {
  const d = await h.startDashboard(['--database', h.databaseUrl('dash_viewer')], [h.NODE_CLIENT_BIN, 'dashboard']);
  started.push(d);
  const state = await (await fetch(new URL('/api/state', d.url))).json();
  assert.equal(state.who.role, 'dash_viewer');
  assert.equal(state.actions, false);
  assert.ok(state.queues.some((q) => q.name === 'emails' && q.stats.dead !== null));
});

test('a payload, an error and a queue name with markup are shown as text', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  const page = await h.openPage(browser, d.url);
  const row = page.locator(`#failed-table tr[data-queue="emails"][data-task="${ids.scriptTask}"]`);
  const text = (await db.query('SELECT $1::jsonb::text AS t', [SCRIPT_PAYLOAD])).rows[0].t;
  assert.ok(text.includes('<script>'));
  assert.equal(await row.locator('td[data-col="payload"]').textContent(), text);
  assert.equal(await row.locator('td[data-col="last_error"]').textContent(), 'smtp said <b>no</b>');
  assert.equal(await page.locator('#failed-table script, #failed-table img, #failed-table b').count(), 0);
  assert.equal(await page.evaluate(() => window.__injected), undefined);
  const odd = page.locator('#queues-table tbody th', { hasText: ODD_QUEUE });
  assert.equal(await odd.count(), 1);
  assert.equal(await page.locator('#queues-table b').count(), 0);
  assert.deepEqual(page.consoleErrors, []);
});

test('no secret reaches the page', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  for (const p of ['/', '/app.js', '/api/state']) {
    const body = await (await fetch(new URL(p, d.url))).text();
    assert.ok(!body.includes(OPS_PASSWORD), `${p} holds no password`);
    assert.ok(!body.includes(process.env.PGHOST), `${p} holds no connection string`);
  }
  // a URL that cannot log in stops the start with the server's message, without the password
  await assert.rejects(h.startDashboard(['--database', h.databaseUrl('no_such_role', OPS_PASSWORD)]), (err) => {
    assert.match(err.message, /exited with 1: .*role "no_such_role" does not exist/);
    assert.ok(!err.message.includes(OPS_PASSWORD));
    return true;
  });
});

async function post(page, body, headers) {
  return page.evaluate(async ({ body, headers }) => {
    const token = document.querySelector('meta[name="csrf-token"]').content;
    const res = await fetch('/api/action', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': token, ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  }, { body, headers: headers || {} });
}

test('a retry button revives a dead task, a cancel button cancels one', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD, '--allow-actions');
  const page = await h.openPage(browser, d.url);
  await shot(page, 'dashboard-failed.png', '#failed');
  const row = (id) => page.locator(`#failed-table tr[data-queue="emails"][data-task="${id}"]`);
  await row(ids.retryTask).locator('button[data-action="retry"]').click();
  await h.until(async () => (await taskState('emails', ids.retryTask)).state === 'ready', 'the retried task to be ready');
  assert.deepEqual(await taskState('emails', ids.retryTask), { state: 'ready', attempt: 0 });
  await page.locator(`#failed-table tr[data-task="${ids.retryTask}"]`).waitFor({ state: 'detached', timeout: 20000 });
  assert.match(await page.locator('#action-result').textContent(), /retry of task \d+ on emails: 1 changed/);

  await row(ids.cancelTask).locator('button[data-action="cancel"]').click();
  await h.until(async () => (await taskState('emails', ids.cancelTask)) === undefined, 'the cancelled task to be gone');
  // the queue retains nothing: a cancelled task without a lease is removed at once
  assert.equal((await db.query("SELECT count(*)::int AS n FROM concurrency.\"q_emails\" WHERE id = $1", [ids.cancelTask])).rows[0].n, 0);
  assert.deepEqual(page.consoleErrors, []);
  // an action the function refuses comes back with its SQLSTATE, nothing changed
  const bad = await post(page, { action: 'retry', queue: 'no_such_queue', ids: ['1'] });
  assert.equal(bad.status, 404);
  assert.equal(bad.body.error.sqlstate, '42704');
  const badIds = await post(page, { action: 'retry', queue: 'emails', ids: ['1; DROP TABLE x'] });
  assert.equal(badIds.status, 400);
  const badAction = await post(page, { action: 'drop_queue', queue: 'emails', ids: ['1'] });
  assert.equal(badAction.status, 400);
});

test('a Pause button pauses the queue, a Resume button resumes it', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD, '--allow-actions');
  const page = await h.openPage(browser, d.url);
  const paused = async () => (await db.query("SELECT paused FROM concurrency.queue WHERE name = 'emails'")).rows[0].paused;
  const cell = page.locator('#queues-table tr[data-queue="emails"] td[data-col="pause"]');
  await cell.locator('button[data-action="pause"]').click();
  await h.until(paused, 'the queue to be paused');
  await h.until(async () => /pause of queue emails: done/.test(await page.locator('#action-result').textContent()),
    'the page to say the queue was paused');
  await page.locator('#queues-table tr[data-queue="emails"] td[data-col="paused"].paused').waitFor({ timeout: 20000 });
  await cell.locator('button[data-action="resume"]').click();
  await h.until(async () => !(await paused()), 'the queue to run again');
  await cell.locator('button[data-action="pause"]').waitFor({ timeout: 20000 });
  assert.deepEqual(page.consoleErrors, []);
  // a queue the function does not know: its SQLSTATE, nothing changed
  const bad = await post(page, { action: 'pause', queue: 'no_such_queue' });
  assert.equal(bad.status, 404);
  assert.equal(bad.body.error.sqlstate, '42704');
});

test('without --allow-actions: no buttons, and the server refuses the POST', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  const page = await h.openPage(browser, d.url);
  assert.ok(await page.locator(`#failed-table tr[data-task="${ids.refusedTask}"]`).count() === 1);
  assert.equal(await page.locator('button.action').count(), 0);
  const r = await post(page, { action: 'retry', queue: 'emails', ids: [String(ids.refusedTask)] });
  assert.equal(r.status, 403);
  assert.match(r.body.error.message, /--allow-actions/);
  assert.equal((await taskState('emails', ids.refusedTask)).state, 'dead');
});

test('without manage on the queue: no buttons, and the POST is refused (42501)', async () => {
  const d = await dashboard('dash_viewer', null, '--allow-actions');
  const page = await h.openPage(browser, d.url);
  assert.ok(await page.locator(`#failed-table tr[data-task="${ids.refusedTask}"]`).count() === 1, 'read shows the dead task');
  assert.equal(await page.locator('button.action').count(), 0);
  const r = await post(page, { action: 'retry', queue: 'emails', ids: [String(ids.refusedTask)] });
  assert.equal(r.status, 403);
  assert.equal(r.body.error.sqlstate, '42501');
  assert.match(r.body.error.message, /dash_viewer/);
  const c = await post(page, { action: 'cancel', queue: 'emails', ids: [String(ids.refusedTask)] });
  assert.equal(c.status, 403);
  const p = await post(page, { action: 'pause', queue: 'emails' });
  assert.equal(p.status, 403);
  assert.equal(p.body.error.sqlstate, '42501');
  assert.equal((await db.query("SELECT paused FROM concurrency.queue WHERE name = 'emails'")).rows[0].paused, false);
  assert.equal((await taskState('emails', ids.refusedTask)).state, 'dead');
});

function raw(url, options, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, options, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('actions need the page token, the page origin and the page host', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD, '--allow-actions');
  const page = await h.openPage(browser, d.url);
  const token = await page.evaluate(() => document.querySelector('meta[name="csrf-token"]').content);
  const body = JSON.stringify({ action: 'retry', queue: 'emails', ids: [String(ids.refusedTask)] });
  const json = { 'Content-Type': 'application/json' };
  const url = new URL('/api/action', d.url);
  assert.equal((await raw(url, { method: 'POST', headers: json }, body)).status, 403, 'no token');
  assert.equal((await raw(url, { method: 'POST', headers: { ...json, 'X-CSRF-Token': 'f'.repeat(64) } }, body)).status, 403, 'wrong token');
  assert.equal((await raw(url, { method: 'POST', headers: { ...json, 'X-CSRF-Token': token, Origin: 'http://evil.example' } }, body)).status, 403, 'other origin');
  assert.equal((await raw(url, { method: 'POST', headers: { ...json, 'X-CSRF-Token': token, Host: 'evil.example' } }, body)).status, 421, 'other host');
  assert.equal((await raw(new URL('/api/state', d.url), { headers: { Host: `evil.example:${url.port}` } })).status, 421, 'rebound name');
  assert.equal((await raw(url, { method: 'POST', headers: { 'Content-Type': 'text/plain', 'X-CSRF-Token': token } }, body)).status, 415, 'a form post');
  assert.equal((await taskState('emails', ids.refusedTask)).state, 'dead');
  // the page's own request, as a check that the guards let it through
  const ok = await post(page, { action: 'cancel', queue: ODD_QUEUE, ids: ['999999'] });
  assert.deepEqual([ok.status, ok.body.count], [200, 0]);
});

test('running tasks with their lease, and progress where the column exists', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  let page = await h.openPage(browser, d.url);
  const running = page.locator('#running-table tr[data-queue="reports"]');
  assert.equal(await running.count(), 2);
  // the deadline shown is task_status's (heartbeats included), still ahead
  const first = running.first();
  const deadline = (await db.query("SELECT lease_expires_at FROM concurrency.task_status('reports', $1)",
    [await first.getAttribute('data-task')])).rows[0].lease_expires_at;
  const lease = first.locator('td[data-col="lease_expires_at"]');
  assert.equal(new Date(await lease.getAttribute('title')).getTime(), deadline.getTime());
  assert.match(await lease.textContent(), /^in \d/);
  assert.equal(await running.first().locator('td[data-col="worker"]').textContent(), 'report-worker-1');
  const hasProgress = (await db.query("SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'concurrency.\"q_reports\"'::regclass AND attname = 'progress'")).rows[0].n > 0;
  if (!hasProgress) {
    // this version has no progress column: the page shows none
    assert.equal(await page.locator('#running-table td[data-col="progress"]').count(), 0);
    await db.query('ALTER TABLE concurrency."q_reports" ADD COLUMN progress jsonb');
  }
  try {
    if (hasProgress) {
      // as a worker reports it
      for (const t of ids.reportLeases) {
        await db.query("SELECT concurrency.heartbeat('reports', $1, $2, progress => '{\"done\": 40, \"of\": 100}')", [t.task_id, t.lease_token]);
      }
    } else {
      await db.query('UPDATE concurrency."q_reports" SET progress = \'{"done": 40, "of": 100}\' WHERE state = \'leased\'');
    }
    await page.close();
    page = await h.openPage(browser, d.url);
    assert.equal(await page.locator('#running-table tr[data-queue="reports"] td[data-col="progress"]').first().textContent(), '{"of": 100, "done": 40}');
    await shot(page, 'dashboard-running.png', '#running');
  } finally {
    if (!hasProgress) await db.query('ALTER TABLE concurrency."q_reports" DROP COLUMN progress');
  }
});

test('schedules: no section without the view, its rows where it exists', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  const exists = (await db.query("SELECT to_regclass('concurrency.schedules') IS NOT NULL AS e")).rows[0].e;
  let page = await h.openPage(browser, d.url);
  if (exists) {
    assert.equal(await page.locator('#schedules').isVisible(), true);
    return;
  }
  assert.equal(await page.locator('#schedules').isVisible(), false);
  // a stand-in with the columns SPEC 8.3 gives the view
  await db.query(`CREATE VIEW concurrency.schedules AS
    SELECT 'nightly-report'::text AS name, 'reports'::text AS queue, '0 3 * * *'::text AS spec, 'UTC'::text AS time_zone,
           '2030-01-01 03:00+00'::timestamptz AS next_run_at, NULL::timestamptz AS last_run_at, NULL::bigint AS last_task_id, true AS enabled`);
  await db.query('GRANT SELECT ON concurrency.schedules TO dash_ops');
  try {
    await page.close();
    page = await h.openPage(browser, d.url);
    assert.equal(await page.locator('#schedules').isVisible(), true);
    assert.equal(await page.locator('#schedules-table td[data-col="name"]').textContent(), 'nightly-report');
  } finally {
    await db.query('DROP VIEW concurrency.schedules');
  }
});

test('a pile-up appears as a graph with the right root, then as an episode of the lock history', async () => {
  await db.query('CREATE TABLE accounts (id int PRIMARY KEY, balance int)');
  await db.query('INSERT INTO accounts VALUES (7, 100)');
  const sessions = [];
  const session = async (name) => {
    const c = new pg.Client({ database: process.env.PGDATABASE || 'postgres', application_name: name });
    await c.connect();
    sessions.push(c);
    c.pid = (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p;
    return c;
  };
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  const pending = [];
  try {
    const idle = await session('billing-worker');
    const ddl = await session('migration');
    const readers = [await session('api'), await session('api')];
    await idle.query('BEGIN');
    await idle.query('SELECT balance FROM accounts WHERE id = 7');
    pending.push(ddl.query('ALTER TABLE accounts ADD COLUMN frozen boolean'));
    await h.until(async () => (await db.query("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", [ddl.pid])).rows[0].wait_event_type === 'Lock', 'the ALTER to wait');
    for (const r of readers) pending.push(r.query('SELECT balance FROM accounts WHERE id = 7'));
    await h.until(async () => (await db.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1) AND wait_event_type = 'Lock'", [readers.map((r) => r.pid)])).rows[0].n === 2, 'the readers to wait');

    const page = await h.openPage(browser, d.url);
    await page.waitForFunction(() => window.dashboard.cy && window.dashboard.cy.nodes().length === 4, null, { timeout: 20000 });
    const graph = await page.evaluate(() => {
      const cy = window.dashboard.cy;
      return {
        roots: cy.nodes('.root').map((n) => n.data('pid')),
        action: cy.nodes('.root').map((n) => n.data('action')),
        edges: cy.edges().map((e) => `${e.source().data('pid')}>${e.target().data('pid')}:${e.hasClass('soft') ? 'soft' : 'hard'}`).sort(),
        label: cy.nodes('.root')[0].data('label'),
        actions: Object.fromEntries(cy.nodes().map((n) => [n.data('pid'), n.data('action')])),
      };
    });
    assert.deepEqual(graph.roots, [idle.pid]);
    assert.deepEqual(graph.action, [`SELECT pg_terminate_backend(${idle.pid})`]);
    assert.match(graph.label, /idle in transaction/);
    // every node carries lock_tree's suggestion: the waiting DDL's is to cancel it (the readers go on)
    const suggested = (await db.query('SELECT pid, action FROM concurrency.lock_tree')).rows;
    assert.equal(suggested.length, 4);
    for (const r of suggested) assert.equal(graph.actions[r.pid], r.action, `the action of ${r.pid}`);
    assert.deepEqual(graph.edges, [
      `${ddl.pid}>${idle.pid}:hard`,
      ...readers.map((r) => `${r.pid}>${ddl.pid}:soft`),
    ].sort());
    // the rows beside the graph say the same
    const rootRow = page.locator(`#lock-roots tr[data-depth="0"]`);
    assert.equal(await rootRow.count(), 1);
    assert.equal(await rootRow.getAttribute('data-pid'), String(idle.pid));
    assert.equal(await rootRow.locator('td[data-col="action"]').textContent(), `SELECT pg_terminate_backend(${idle.pid})`);
    await shot(page, 'dashboard-lock-graph.png', '#locks');

    // the root ends its transaction: the pile-up goes, the episode stays
    await idle.query('ROLLBACK');
    await Promise.all(pending);
    await page.locator('#locks-empty').waitFor({ state: 'visible', timeout: 20000 });
    const bar = page.locator(`#history-timeline g.episode[data-root="${idle.pid}"]`);
    await bar.first().waitFor({ timeout: 20000 });
    const episode = page.locator(`#history-table tr[data-root="${idle.pid}"]`).first();
    await h.until(async () => (await episode.locator('td[data-col="ended_by"]').textContent()) === 'released', 'the episode to end', 20000);
    await shot(page, 'dashboard-lock-history.png', '#history');
  } finally {
    for (const c of sessions) await c.end().catch(() => {});
    await db.query('DROP TABLE IF EXISTS accounts');
  }
});

test('throughput: tasks enqueued and finished while the dashboard samples', async () => {
  const d = await dashboard('dash_ops', OPS_PASSWORD);
  const page = await h.openPage(browser, d.url);
  // two samples of the queue before the work (one every second)
  await page.waitForFunction(() => window.dashboard.state.throughput.samples >= 2, null, { timeout: 20000 });
  const worker = new pg.Client({ database: process.env.PGDATABASE || 'postgres' });
  await worker.connect();
  try {
    await worker.query("SELECT concurrency.enqueue_batch('throughput', array_fill('{}'::jsonb, ARRAY[7]))");
    const claimed = (await worker.query("SELECT task_id, lease_token FROM concurrency.dequeue('throughput', batch => 5)")).rows;
    await worker.query("SELECT concurrency.complete_batch('throughput', $1, $2)", [claimed.map((t) => t.task_id), claimed.map((t) => t.lease_token)]);
  } finally {
    await worker.end(); // its statistics are reported when it goes
  }
  const cell = (c) => page.locator(`#queues-table tr[data-queue="throughput"] td[data-col="${c}"]`).textContent();
  await h.until(async () => (await cell('enqueued_last_hour')) === '7' && (await cell('finished_last_hour')) === '5', 'enqueued 7, finished 5', 30000);
  const chart = await page.evaluate(() => window.dashboard.state.throughput.queues.throughput.finished_per_min.filter((v) => v > 0).length);
  assert.ok(chart >= 1, 'a point above zero in the chart');
  assert.equal((await cell('ready')), '2');
  await shot(page, 'dashboard-throughput.png', '#throughput');
});
