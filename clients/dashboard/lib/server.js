'use strict';
// The dashboard's HTTP server: one page (public/), the drawing libraries'
// own dist files from node_modules, GET /api/state (everything the page
// shows, read as the role the database URL logs in with), GET /api/tasks
// (search, lib/search.js), GET /api/steps (a task's steps), and the actions,
// only with --allow-actions: POST /api/action (retry_dead, cancel, pause,
// resume of listed tasks or a queue), POST /api/bulk/preview and /api/bulk
// (retry or cancel every task a search finds). It binds 127.0.0.1 only,
// answers only requests addressed to that host name and port or to the
// --public-host a reverse proxy forwards (no DNS rebinding), refuses with
// 401 every request without the --token or --user credentials where they are
// set (lib/auth.js), and checks a per-process token and the Origin on every
// action (no cross-site request). The database URL, and so its password,
// never reaches the page.

const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const pg = require('pg');

const q = require('./queries');
const { Auth } = require('./auth');
const { ServerHistory } = require('./history');
const search = require('./search');
const { Throughput } = require('./throughput');

const PUBLIC = path.join(__dirname, '..', 'public');
const dist = (pkg, file) => path.join(path.dirname(require.resolve(pkg)), file);

// Every file the server sends, by URL path: nothing else on disk is reachable.
const FILES = {
  '/app.js': [path.join(PUBLIC, 'app.js'), 'text/javascript'],
  '/dom.js': [path.join(PUBLIC, 'dom.js'), 'text/javascript'],
  '/search.js': [path.join(PUBLIC, 'search.js'), 'text/javascript'],
  '/workflows.js': [path.join(PUBLIC, 'workflows.js'), 'text/javascript'],
  '/style.css': [path.join(PUBLIC, 'style.css'), 'text/css'],
  '/vendor/cytoscape.min.js': [dist('cytoscape', 'cytoscape.min.js'), 'text/javascript'],
  '/vendor/cytoscape-dagre.js': [dist('cytoscape-dagre', 'cytoscape-dagre.js'), 'text/javascript'],
  '/vendor/uPlot.iife.min.js': [dist('uplot', 'uPlot.iife.min.js'), 'text/javascript'],
  '/vendor/uPlot.min.css': [dist('uplot', 'uPlot.min.css'), 'text/css'],
};

const SECURITY_HEADERS = {
  'Content-Security-Policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    + "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

// SQLSTATE classes of the queue functions' errors, as HTTP statuses.
function httpStatus(err) {
  const code = err && err.code;
  if (code === '42501') return 403;
  if (code === '42704' || code === '42P01') return 404;
  if (typeof code === 'string' && code.startsWith('22')) return 400;
  return 500;
}

function pgError(err) {
  return { message: err.message, sqlstate: err.code || null, detail: err.detail || null, hint: err.hint || null };
}

class Dashboard {
  // options: databaseUrl (or PG* environment), port (0: any free one),
  // allowActions, refreshSeconds (the page's polling), sampleSeconds
  // (throughput samples of its own), historyHours (the charts' window),
  // poolSize, token / user + password (lib/auth.js), publicHosts (host
  // names, with :port where not 80/443, that a reverse proxy forwards)
  constructor(options) {
    this.options = { port: 8431, allowActions: false, refreshSeconds: 2, sampleSeconds: 10, historyHours: 6,
      poolSize: 4, publicHosts: [], ...options };
    this.auth = new Auth({ token: this.options.token, user: this.options.user, password: this.options.password });
    this.token = crypto.randomBytes(32).toString('hex');
    const types = {
      getTypeParser: (oid, format) => {
        if (oid === 1186) return (v) => v; // interval: PostgreSQL's own text
        if (oid === 3802 || oid === 114) return (v) => v; // json, jsonb: shown as text, never re-serialised
        return pg.types.getTypeParser(oid, format);
      },
    };
    this.pool = new pg.Pool({
      connectionString: this.options.databaseUrl,
      max: this.options.poolSize,
      application_name: 'concurrency-ext-dashboard',
      // a dashboard must not join a lock queue it is there to show, nor run long
      statement_timeout: 10000,
      lock_timeout: 1000,
      types,
    });
    this.pool.on('error', (err) => process.stderr.write(`dashboard: idle connection lost: ${err.message}\n`));
    this.throughput = new Throughput();
    this.history = new ServerHistory(this.options.historyHours);
    this.lastSampleError = null;
    this.stateCache = null;
    this.index = fs.readFileSync(path.join(PUBLIC, 'index.html'), 'utf8');
  }

  async start() {
    await this.query(q.WHO_SQL); // a wrong URL or password stops the start, with the server's message
    await this.sample(); // one before the page asks, so that a rate has a start
    this.sampler = setInterval(() => this.sample(), this.options.sampleSeconds * 1000);
    this.sampler.unref();
    this.server = http.createServer((req, res) => this.handle(req, res).catch((err) => {
      process.stderr.write(`dashboard: ${req.method} ${req.url}: ${err.stack || err}\n`);
      if (!res.headersSent) this.json(res, 500, { error: { message: 'internal error' } });
      else res.end();
    }));
    await new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.port, '127.0.0.1', resolve);
    });
    this.port = this.server.address().port;
    this.allowedHosts = new Set([`127.0.0.1:${this.port}`, `localhost:${this.port}`]);
    this.origins = new Set([`http://127.0.0.1:${this.port}`, `http://localhost:${this.port}`]);
    for (const host of this.options.publicHosts) {
      const name = host.toLowerCase();
      this.allowedHosts.add(name);
      this.origins.add(`https://${name}`);
      this.origins.add(`http://${name}`);
    }
    return `http://127.0.0.1:${this.port}/`;
  }

  async close() {
    clearInterval(this.sampler);
    if (this.server) {
      const closed = new Promise((resolve) => this.server.close(resolve));
      // pages keep their connections open between polls
      if (this.server.closeAllConnections) this.server.closeAllConnections();
      await closed;
    }
    await this.pool.end();
  }

  // A connection of the pool, set up once: the dashboard's own statements
  // resolve names in pg_catalog first, whatever the role's search_path says.
  async connect() {
    const client = await this.pool.connect();
    if (!client.dashboardReady) {
      try {
        await client.query('SET search_path = pg_catalog, pg_temp');
      } catch (err) {
        client.release(err);
        throw err;
      }
      client.dashboardReady = true;
    }
    return client;
  }

  async query(sql, params) {
    const client = await this.connect();
    try {
      return await client.query(sql, params);
    } finally {
      client.release();
    }
  }

  async sample() {
    try {
      this.throughput.add(await this.query(q.SAMPLE_SQL));
      this.lastSampleError = null;
    } catch (err) {
      this.lastSampleError = pgError(err);
    }
  }

  send(res, status, type, body, headers) {
    res.writeHead(status, { ...SECURITY_HEADERS, ...headers, 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  }

  json(res, status, value, headers) {
    this.send(res, status, 'application/json; charset=utf-8', JSON.stringify(value), headers);
  }

  async handle(req, res) {
    // Only requests for this host name and port: a page of another site that
    // rebinds its own name to 127.0.0.1 gets nothing.
    if (!this.allowedHosts.has((req.headers.host || '').toLowerCase())) {
      return this.json(res, 421, { error: { message: 'unknown host' } });
    }
    const url = new URL(req.url, `http://${req.headers.host}`);
    const extra = {};
    const refused = this.auth.check(req, url, (cookie) => { extra['Set-Cookie'] = cookie; });
    if (refused) return this.json(res, refused.status, { error: { message: refused.message } }, refused.headers);
    if (req.method === 'GET' || req.method === 'HEAD') {
      if (url.pathname === '/' || url.pathname === '/index.html') {
        const page = this.index
          .replace('{{csrf_token}}', this.token)
          .replace('{{allow_actions}}', this.options.allowActions ? 'true' : 'false')
          .replace('{{refresh_seconds}}', String(this.options.refreshSeconds));
        return this.send(res, 200, 'text/html; charset=utf-8', page, extra);
      }
      if (url.pathname === '/api/state') return this.json(res, 200, await this.state());
      if (url.pathname === '/api/tasks') return this.read(res, (c) => search.search(c, Object.fromEntries(url.searchParams)));
      if (url.pathname === '/api/steps') return this.read(res, (c) => this.steps(c, url.searchParams));
      const file = FILES[url.pathname];
      if (file) return this.send(res, 200, `${file[1]}; charset=utf-8`, fs.readFileSync(file[0]));
      return this.json(res, 404, { error: { message: 'not found' } });
    }
    if (req.method === 'POST' && url.pathname === '/api/action') return this.action(req, res);
    if (req.method === 'POST' && (url.pathname === '/api/bulk/preview' || url.pathname === '/api/bulk')) {
      const body = await this.actionBody(req, res);
      if (body === undefined) return undefined;
      const run = url.pathname === '/api/bulk' ? search.act : search.preview;
      return this.read(res, async (c) => {
        const out = await run(c, body);
        if (url.pathname === '/api/bulk') this.stateCache = null;
        return out;
      });
    }
    return this.json(res, 405, { error: { message: 'method not allowed' } });
  }

  // Answers with what `fn(client)` returns: 400 (or its status) for a bad
  // request, the SQLSTATE's status for a server error.
  async read(res, fn) {
    let client;
    try {
      client = await this.connect();
      return this.json(res, 200, await fn(client));
    } catch (err) {
      if (err instanceof search.BadRequest) return this.json(res, err.status, { error: { message: err.message } });
      return this.json(res, httpStatus(err), { error: pgError(err) });
    } finally {
      if (client) client.release();
    }
  }

  // GET /api/steps?queue=&id=: concurrency.task_steps (permission read)
  async steps(client, params) {
    const queue = params.get('queue');
    const id = params.get('id') || '';
    if (!queue || !/^[1-9][0-9]{0,18}$/.test(id)) throw new search.BadRequest('queue and id (a task id) are required');
    const r = await client.query(q.TASK_STEPS_SQL, [queue, id]);
    return { queue, id, steps: r.rows };
  }

  // The JSON body of an action, after the checks every action passes (the
  // page's Origin and token, --allow-actions, JSON); undefined when refused
  // (the answer sent).
  async actionBody(req, res) {
    const origin = req.headers.origin;
    if (origin !== undefined && !this.origins.has(origin)) {
      return this.refuse(res, 403, 'cross-origin request refused');
    }
    const token = req.headers['x-csrf-token'];
    if (typeof token !== 'string' || token.length !== this.token.length
        || !crypto.timingSafeEqual(Buffer.from(token), Buffer.from(this.token))) {
      return this.refuse(res, 403, 'missing or wrong X-CSRF-Token');
    }
    if (!this.options.allowActions) {
      return this.refuse(res, 403, 'actions are off: start the dashboard with --allow-actions');
    }
    if (!/^application\/json(;|$)/.test(req.headers['content-type'] || '')) {
      return this.refuse(res, 415, 'send application/json');
    }
    try {
      return JSON.parse(await readBody(req, 65536));
    } catch (err) {
      this.json(res, 400, { error: { message: `bad request body: ${err.message}` } });
      return undefined;
    }
  }

  // POST /api/action {action: 'retry' | 'cancel', queue, ids: [task ids]}
  // or {action: 'pause' | 'resume', queue}
  async action(req, res) {
    const body = await this.actionBody(req, res);
    if (body === undefined) return undefined;
    const own = (table) => body && Object.prototype.hasOwnProperty.call(table, body.action);
    const sql = own(q.ACTIONS) ? q.ACTIONS[body.action] : null;
    const queueSql = own(q.QUEUE_ACTIONS) ? q.QUEUE_ACTIONS[body.action] : null;
    if (!sql && !queueSql) {
      return this.json(res, 400, { error: { message: 'action must be "retry", "cancel", "pause" or "resume"' } });
    }
    if (typeof body.queue !== 'string') return this.json(res, 400, { error: { message: 'queue must be a string' } });
    if (queueSql) {
      try {
        const r = await this.query(queueSql, [body.queue]);
        this.stateCache = null;
        return this.json(res, 200, { action: body.action, queue: body.queue, changed: r.rows[0].changed === true });
      } catch (err) {
        return this.json(res, httpStatus(err), { error: pgError(err) });
      }
    }
    const ids = body.ids;
    if (!Array.isArray(ids) || ids.length < 1 || ids.length > 1000
        || !ids.every((id) => (typeof id === 'string' || typeof id === 'number') && /^[1-9][0-9]{0,18}$/.test(String(id)))) {
      return this.json(res, 400, { error: { message: 'ids must be 1 to 1000 task ids' } });
    }
    try {
      const r = await this.query(sql, [body.queue, ids.map(String)]);
      this.stateCache = null;
      return this.json(res, 200, { action: body.action, queue: body.queue, count: Number(r.rows[0].count) });
    } catch (err) {
      return this.json(res, httpStatus(err), { error: pgError(err) });
    }
  }

  refuse(res, status, message) {
    this.json(res, status, { error: { message } });
    return undefined;
  }

  // Everything the page shows. Pages polling at once share one read a second.
  async state() {
    const now = Date.now();
    if (this.stateCache && now - this.stateCache.at < 1000) return this.stateCache.promise;
    const promise = this.readState();
    this.stateCache = { at: now, promise };
    promise.catch(() => { this.stateCache = null; });
    return promise;
  }

  async readState() {
    const out = { read_at: new Date().toISOString(), actions: this.options.allowActions };
    let client;
    try {
      client = await this.connect();
      out.who = (await client.query(q.WHO_SQL)).rows[0];
      if (!out.who.extension_version) {
        out.error = { message: 'the extension concurrency_ext is not installed in this database' };
        return out;
      }
      const queues = await client.query(q.QUEUES_SQL);
      const stats = await client.query('SELECT * FROM concurrency.queue_stats');
      const byName = new Map(stats.rows.map((r) => [r.queue, r]));
      out.stats_columns = stats.fields.map((f) => f.name).filter((n) => n !== 'queue');
      out.setting_columns = queues.fields.map((f) => f.name)
        .filter((n) => !['name', 'relid', 'may_manage', 'may_select', 'created_at', 'created_by', 'paused'].includes(n));
      const relids = queues.rows.filter((r) => r.relid !== null).map((r) => r.relid);
      const optional = await client.query(q.OPTIONAL_TASK_COLUMNS_SQL, [relids]);
      out.queues = [];
      for (const row of queues.rows) {
        const s = byName.get(row.name) || null;
        const entry = {
          name: row.name,
          settings: Object.fromEntries(out.setting_columns.map((c) => [c, row[c]])),
          stats: s && Object.fromEntries(out.stats_columns.map((c) => [c, s[c]])),
          readable: Boolean(s && s.ready !== null),
          tasks_readable: row.may_select,
          may_manage: row.may_manage,
        };
        out.queues.push(entry);
        if (!entry.readable || !entry.tasks_readable) continue;
        const columns = new Set(optional.rows.filter((r) => String(r.relid) === String(row.relid)).map((r) => r.name));
        entry.has_progress = columns.has('progress');
        entry.has_workflows = columns.has('awaiting') && columns.has('steps');
        const lists = [
          ['dead', Number(s.dead) > 0 && q.deadTasksSql(row.name)],
          ['retrying', Number(s.scheduled) > 0 && q.retryingTasksSql(row.name)],
          ['running', Number(s.leased) + Number(s.expired) > 0 && q.runningTasksSql(row.name, columns)],
          ['workflow', entry.has_workflows && Number(s.scheduled) > 0 && q.workflowTasksSql(row.name)],
        ];
        for (const [key, sql] of lists) {
          if (!sql) { entry[key] = []; continue; }
          try {
            entry[key] = (await client.query(sql)).rows;
          } catch (err) {
            entry[key] = [];
            entry.error = pgError(err);
          }
        }
      }
      out.schedules = null; // no schedules view: the page shows no such section
      if ((await client.query(q.SCHEDULES_EXIST_SQL)).rows[0].present) {
        try {
          const r = await client.query(q.SCHEDULES_SQL);
          out.schedules = { columns: r.fields.map((f) => f.name), rows: r.rows };
        } catch (err) {
          out.schedules = { columns: [], rows: [], error: pgError(err) };
        }
      }
      out.counters = null; // no counters view (before 0.4.0): no such section
      if ((await client.query(q.COUNTERS_EXIST_SQL)).rows[0].present) {
        try {
          out.counters = { rows: (await client.query(q.COUNTERS_SQL)).rows };
        } catch (err) {
          out.counters = { rows: [], error: pgError(err) };
        }
      }
      try {
        out.server_history = await this.history.read(client);
      } catch (err) {
        out.server_history = null;
        out.history_error = pgError(err);
      }
      out.lock_tree = (await client.query(q.LOCK_TREE_SQL)).rows;
      out.lock_waits = (await client.query(q.LOCK_WAITS_SQL)).rows;
      try {
        out.lock_history = { enabled: true, episodes: (await client.query(q.LOCK_HISTORY_SQL)).rows };
      } catch (err) {
        if (err.code !== '55000') throw err;
        out.lock_history = { enabled: false, error: pgError(err) };
      }
    } catch (err) {
      out.error = pgError(err);
    } finally {
      if (client) client.release();
    }
    // the extension's samples where it keeps them, else the dashboard's own
    if (out.server_history) {
      out.throughput = out.server_history;
      out.throughput.source = 'server';
      out.throughput.window_hours = this.options.historyHours;
    } else {
      out.throughput = this.throughput.series();
      out.throughput.source = 'dashboard';
      out.throughput.sample_seconds = this.options.sampleSeconds;
      out.throughput.error = this.lastSampleError;
      out.throughput.window_hours = 1;
    }
    delete out.server_history;
    return out;
  }
}

function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > limit) {
        reject(new Error('too large'));
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

module.exports = { Dashboard };
