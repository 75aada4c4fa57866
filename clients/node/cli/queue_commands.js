'use strict';
// stats, retry, cancel and drain: one queue function or view each. Every
// command returns { result, exitCode, text }: `result` is what --json prints,
// `text` what a person reads.
const { CommandError } = require('./session');

const COUNTS = ['ready', 'scheduled', 'leased', 'expired', 'dead', 'blocked', 'waiting', 'done', 'cancelled'];

const STATS_SQL = `
SELECT queue, ready, scheduled, leased, expired, dead, blocked, waiting, done, cancelled, paused,
       extract(epoch FROM oldest_ready_age)::float8 AS oldest_ready_age_seconds
  FROM concurrency.queue_stats
 WHERE $1::text IS NULL OR queue = $1::text
 ORDER BY queue`;

// counts come as bigint text; NULL (no permission read) stays null
const count = (v) => (v === null || v === undefined ? null : Number(v));

function statsRow(row) {
  const out = { queue: row.queue };
  for (const c of COUNTS) out[c] = count(row[c]);
  out.oldest_ready_age_seconds = row.oldest_ready_age_seconds;
  out.paused = row.paused;
  return out;
}

async function queueStats(session, queue) {
  const rows = (await session.rows(STATS_SQL, [queue ?? null])).map(statsRow);
  if (queue !== undefined && rows.length === 0) throw new CommandError(`queue "${queue}" does not exist`, '42704');
  return rows;
}

function table(header, lines) {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => String(l[i]).length)));
  const fmt = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i])))
    .join('  ').trimEnd();
  return [fmt(header), ...lines.map(fmt)].join('\n');
}

async function stats(session, { queue }) {
  const rows = await queueStats(session, queue);
  const shown = (v) => (v === null ? '-' : v);
  const age = (r) => (r.oldest_ready_age_seconds === null ? '' : `${r.oldest_ready_age_seconds.toFixed(1)}s`);
  const text = rows.length === 0 ? 'no queues' : table(
    ['queue', ...COUNTS, 'oldest ready', 'paused'],
    rows.map((r) => [r.queue, ...COUNTS.map((c) => shown(r[c])), age(r), r.paused ? 'yes' : '']),
  ) + (rows.some((r) => r.ready === null) ? '\n(-: you lack permission read on the queue)' : '');
  return { result: rows, exitCode: 0, text };
}

async function retry(session, { queue, ids }) {
  const [row] = await session.rows('SELECT concurrency.retry_dead($1::text, $2::bigint[]) AS n', [queue, ids]);
  const n = Number(row.n);
  return { result: { queue, retried: n }, exitCode: 0, text: `${n} dead task(s) of queue "${queue}" ready again` };
}

async function cancel(session, { queue, ids }) {
  const [row] = await session.rows('SELECT concurrency.cancel($1::text, $2::bigint[]) AS n', [queue, ids]);
  const n = Number(row.n);
  return { result: { queue, cancelled: n }, exitCode: 0, text: `${n} task(s) of queue "${queue}" cancelled` };
}

// The counts that keep a queue from being drained: tasks a worker can claim
// now (ready, due scheduled ones included), holds (leased, expired) and
// tasks held back behind them by a limit (blocked). Tasks scheduled for
// later and tasks waiting for their parents do not count.
const PENDING = ['ready', 'leased', 'expired', 'blocked'];

async function drain(session, { queue, timeout, interval = 500 }) {
  const started = Date.now();
  for (;;) {
    const [row] = await queueStats(session, queue);
    if (row.ready === null) throw new CommandError(`you lack permission read on queue "${queue}"`, '42501');
    const pending = Object.fromEntries(PENDING.map((c) => [c, row[c]]));
    const waited = (Date.now() - started) / 1000;
    const drained = PENDING.every((c) => row[c] === 0);
    if (drained || waited >= timeout) {
      const left = PENDING.filter((c) => row[c] > 0).map((c) => `${row[c]} ${c}`).join(', ');
      return {
        result: { queue, drained, waited_seconds: waited, ...pending },
        exitCode: drained ? 0 : 1,
        text: drained ? `queue "${queue}" drained after ${waited.toFixed(1)}s`
          : `queue "${queue}" not drained after ${waited.toFixed(1)}s: ${left}`,
      };
    }
    await new Promise((r) => setTimeout(r, Math.min(interval, Math.max(0, timeout * 1000 - (Date.now() - started)))));
  }
}

module.exports = { stats, retry, cancel, drain };
