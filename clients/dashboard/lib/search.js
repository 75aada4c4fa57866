'use strict';
// Searching the tasks of a queue, and acting on every task a search finds.
//
// A search is a queue and any of: a state, a payload (jsonb containment,
// payload @> the JSON given, parsed here: invalid JSON is refused with 400),
// an error text (a case-insensitive substring of last_error, its LIKE
// wildcards escaped). Pages of up to 100 tasks, newest first, keyset-paged
// by id (after: the last id of the page before), with the count of all the
// tasks that match, per state.
//
// A bulk action (retry: the dead tasks that match; cancel: the matching
// tasks that are not done or cancelled) is in two steps: a preview gives
// the count of the tasks it would change and a digest of their ids; the
// action carries both back and runs in one transaction that locks the
// matching rows, recomputes both and changes nothing (409) unless they are
// the same, then calls retry_dead or cancel with exactly those ids. The
// transaction is REPEATABLE READ: the ids are read in the snapshot that the
// call then changes, and a task another session changed meanwhile makes the
// call fail (40001), which is refused with 409 too, nothing changed.
const crypto = require('node:crypto');
const { escapeIdentifier } = require('pg');

const STATES = ['ready', 'scheduled', 'leased', 'dead', 'done', 'cancelled', 'waiting'];
const PAGE = 50;
const BULK_MAX = 10000; // tasks per bulk action
const PAYLOAD_CHARS = 4000;

class BadRequest extends Error {
  constructor(message, status = 400) {
    super(message);
    this.status = status;
  }
}

const table = (queue) => `concurrency.${escapeIdentifier('q_' + queue)}`;

// LIKE pattern for a substring: \, % and _ escaped with LIKE's default escape, \
function likeSubstring(text) {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

// The filter of a request (an object of strings: a URL's query or a JSON
// body's filter) as SQL and parameters, parameters from $1.
function parseFilter(input) {
  const get = (k) => (input && typeof input[k] === 'string' ? input[k] : '');
  const queue = get('queue');
  if (!queue) throw new BadRequest('queue is required');
  const where = [];
  const params = [];
  const state = get('state');
  if (state) {
    if (!STATES.includes(state)) throw new BadRequest(`state must be one of ${STATES.join(', ')}`);
    params.push(state);
    where.push(`state OPERATOR(pg_catalog.=) $${params.length}`);
  }
  const payload = get('payload').trim();
  let payloadJson = null;
  if (payload) {
    try {
      payloadJson = JSON.parse(payload);
    } catch (err) {
      throw new BadRequest(`payload is not valid JSON: ${err.message}`);
    }
    params.push(JSON.stringify(payloadJson));
    where.push(`payload OPERATOR(pg_catalog.@>) $${params.length}::pg_catalog.jsonb`);
  }
  const error = get('error');
  if (error) {
    if (error.length > 1000) throw new BadRequest('error text: at most 1000 characters');
    params.push(likeSubstring(error));
    // LIKE's escape character is \ by default (the OPERATOR form takes no ESCAPE clause)
    where.push(`last_error OPERATOR(pg_catalog.~~*) $${params.length}`);
  }
  return { queue, state: state || null, payload: payloadJson, error: error || null, where, params };
}

const whereSql = (f, extra = []) => {
  const all = [...f.where, ...extra];
  return all.length ? `WHERE ${all.join(' AND ')}` : '';
};

// What each bulk action changes among the matching tasks.
const BULK = {
  retry: { condition: "state OPERATOR(pg_catalog.=) 'dead'",
    sql: 'SELECT concurrency.retry_dead($1, $2::pg_catalog.int8[]) AS count' },
  cancel: { condition: "state OPERATOR(pg_catalog.<>) ALL ('{done,cancelled}'::pg_catalog.text[])",
    sql: 'SELECT concurrency.cancel($1, $2::pg_catalog.int8[]) AS count' },
};

function digest(ids) {
  return crypto.createHash('sha256').update(ids.join(',')).digest('hex');
}

// GET /api/tasks?queue=&state=&payload=&error=&after=
async function search(client, query) {
  const f = parseFilter(query);
  const after = query.after || '';
  if (after && !/^[1-9][0-9]{0,18}$/.test(after)) throw new BadRequest('after must be a task id');
  const params = [...f.params];
  const extra = [];
  if (after) {
    params.push(after);
    extra.push(`id OPERATOR(pg_catalog.<) $${params.length}::pg_catalog.int8`);
  }
  const t = table(f.queue);
  const rows = (await client.query(
    `SELECT id, state, attempt, priority, last_error, pg_catalog.left(payload::pg_catalog.text, ${PAYLOAD_CHARS}) AS payload,
            pg_catalog.length(payload::pg_catalog.text) > ${PAYLOAD_CHARS} AS payload_cut,
            enqueued_at, run_at, finished_at, worker
       FROM ${t} ${whereSql(f, extra)} ORDER BY id DESC LIMIT ${PAGE + 1}`, params)).rows;
  const counts = (await client.query(
    `SELECT state, pg_catalog.count(*) AS n FROM ${t} ${whereSql(f)} GROUP BY state ORDER BY state`, f.params)).rows;
  const bulk = {};
  for (const [action, b] of Object.entries(BULK)) {
    const n = await client.query(`SELECT pg_catalog.count(*) AS n FROM ${t} ${whereSql(f, [b.condition])}`, f.params);
    bulk[action] = Number(n.rows[0].n);
  }
  const more = rows.length > PAGE;
  const page = rows.slice(0, PAGE);
  return {
    filter: { queue: f.queue, state: f.state, payload: f.payload, error: f.error },
    tasks: page,
    next_after: more ? String(page[page.length - 1].id) : null,
    count: counts.reduce((s, r) => s + Number(r.n), 0),
    by_state: Object.fromEntries(counts.map((r) => [r.state, Number(r.n)])),
    bulk,
  };
}

// The ids a bulk action would change, in order.
async function bulkIds(client, f, action) {
  const rows = (await client.query(
    `SELECT id FROM ${table(f.queue)} ${whereSql(f, [BULK[action].condition])} ORDER BY id
      LIMIT ${BULK_MAX + 1}`, f.params)).rows;
  return rows.map((r) => String(r.id));
}

function bulkAction(body) {
  const action = body && typeof body.action === 'string' && Object.prototype.hasOwnProperty.call(BULK, body.action)
    ? body.action : null;
  if (!action) throw new BadRequest('action must be "retry" or "cancel"');
  return action;
}

// POST /api/bulk/preview {action, filter}
async function preview(client, body) {
  const action = bulkAction(body);
  const f = parseFilter(body.filter);
  const ids = await bulkIds(client, f, action);
  if (ids.length > BULK_MAX) throw new BadRequest(`more than ${BULK_MAX} tasks match: narrow the search`);
  return { action, queue: f.queue, count: ids.length, digest: digest(ids) };
}

// POST /api/bulk {action, filter, count, digest}
async function act(client, body) {
  const action = bulkAction(body);
  const f = parseFilter(body.filter);
  if (!Number.isInteger(body.count) || typeof body.digest !== 'string') {
    throw new BadRequest('count and digest (from /api/bulk/preview) are required');
  }
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
  try {
    const ids = await bulkIds(client, f, action);
    if (ids.length !== body.count || digest(ids) !== body.digest) {
      throw new BadRequest(`the matching tasks changed since they were counted (${ids.length} now, `
        + `${body.count} counted): nothing was done; count them again`, 409);
    }
    let changed = 0;
    if (ids.length > 0) changed = Number((await client.query(BULK[action].sql, [f.queue, ids])).rows[0].count);
    await client.query('COMMIT');
    return { action, queue: f.queue, count: changed, ids };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    if (err.code === '40001') {
      throw new BadRequest('a matching task changed while the action ran: nothing was done; count them again', 409);
    }
    throw err;
  }
}

module.exports = { search, preview, act, parseFilter, likeSubstring, BadRequest, STATES, PAGE, BULK_MAX };
