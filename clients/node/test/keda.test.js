'use strict';
// The autoscaling query of docs/operations.md ("Autoscaling with KEDA"),
// taken out of the page's ScaledObject as written there and run as KEDA runs
// it, against queue emails with tasks in every state that must and must not
// count; and the exporter's claimable figure (examples/monitoring/queries.yaml)
// for the same queue, which must be the same number.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { pool, freshDatabase, until } = require('./helpers');

const db = pool();
after(() => db.end());

const ROOT = path.join(__dirname, '..', '..', '..');

// The value of `key: >-` (a folded block of lines of one indentation) in
// the ```yaml block of a Markdown file that contains `marker`.
function foldedValue(markdown, marker, key) {
  const block = [...markdown.matchAll(/^```yaml\n([\s\S]*?)^```$/gm)].map((m) => m[1]).find((b) => b.includes(marker));
  assert.ok(block, `a yaml block with ${marker}`);
  const lines = block.split('\n');
  const at = lines.findIndex((l) => l.trim() === `${key}: >-`);
  assert.ok(at >= 0, `${key}: >- in the block`);
  const keyIndent = lines[at].search(/\S/);
  const body = [];
  for (const line of lines.slice(at + 1)) {
    if (line.trim() === '' || line.search(/\S/) <= keyIndent) break;
    body.push(line);
  }
  const indents = new Set(body.map((l) => l.search(/\S/)));
  assert.equal(indents.size, 1, 'every line of the query at one indentation (folded by YAML into one line)');
  return body.map((l) => l.trim()).join(' ');
}

// The query of a top-level metric of a postgres_exporter queries file (its
// `query: |` literal block).
function exporterQuery(yaml, metric) {
  const lines = yaml.split('\n');
  const start = lines.indexOf(`${metric}:`);
  assert.ok(start >= 0, `${metric} in the queries file`);
  assert.equal(lines[start + 1], '  query: |');
  const body = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('    ')) break;
    body.push(line.slice(4));
  }
  return body.join('\n');
}

const kedaQuery = foldedValue(fs.readFileSync(path.join(ROOT, 'docs', 'operations.md'), 'utf8'),
  'kind: ScaledObject', 'query');
const exporterSql = exporterQuery(fs.readFileSync(path.join(ROOT, 'examples', 'monitoring', 'queries.yaml'), 'utf8'),
  'concurrency_queue');

test('the KEDA query of docs/operations.md counts ready, due and expired tasks of its queue, 0 while paused, '
  + 'and the exporter says the same', async () => {
  assert.match(kedaQuery, /queue = 'emails'/);
  const fresh = await freshDatabase(db, 'keda');
  const q = fresh.pool;
  const figure = async () => {
    const { rows, fields } = await q.query(kedaQuery);
    assert.equal(rows.length, 1, 'one row');
    assert.equal(fields.length, 1, 'one column');
    return Number(rows[0][fields[0].name]);
  };
  const exported = async () => {
    const row = (await q.query(exporterSql)).rows.find((r) => r.queue === 'emails');
    return Number(row.claimable);
  };
  try {
    await q.query(`SELECT concurrency.create_queue('emails')`);
    assert.equal(await figure(), 0, 'an empty queue');
    await q.query(`SELECT concurrency.create_queue('other')`);
    await q.query(`SELECT concurrency.enqueue('other', '{}') FROM generate_series(1, 7)`);
    // 1 expired lease: claimed first (highest priority) with a short lease
    await q.query(`SELECT concurrency.enqueue('emails', '{}', priority => 20)`);
    await q.query(`SELECT * FROM concurrency.dequeue('emails', lease => '50 milliseconds')`);
    // 2 leased: claimed next, with a long lease
    await q.query(`SELECT concurrency.enqueue('emails', '{}', priority => 10) FROM generate_series(1, 2)`);
    assert.equal((await q.query(`SELECT * FROM concurrency.dequeue('emails', batch => 2, lease => '1 hour')`)).rows.length, 2);
    // 3 ready, 4 scheduled for later, 2 scheduled and due by the time of the query
    await q.query(`SELECT concurrency.enqueue('emails', '{}') FROM generate_series(1, 3)`);
    await q.query(`SELECT concurrency.enqueue('emails', '{}', run_at => now() + interval '1 hour') FROM generate_series(1, 4)`);
    await q.query(`SELECT concurrency.enqueue('emails', '{}', run_at => clock_timestamp() + interval '300 milliseconds')
                     FROM generate_series(1, 2)`);
    await until(async () => (await q.query(`SELECT expired, scheduled FROM concurrency.queue_stats WHERE queue = 'emails'`))
      .rows.every((r) => Number(r.expired) === 1 && Number(r.scheduled) === 4), 'the lease to expire and two tasks to fall due');
    const stats = (await q.query(`SELECT * FROM concurrency.queue_stats WHERE queue = 'emails'`)).rows[0];
    assert.deepEqual([stats.ready, stats.scheduled, stats.leased, stats.expired].map(Number), [5, 4, 2, 1]);

    assert.equal(await figure(), 3 + 2 + 1, 'ready + due + expired; not the leased or future ones, nor other queues');
    assert.equal(await exported(), 6, 'the exporter\'s claimable');

    await q.query(`SELECT concurrency.pause_queue('emails')`);
    assert.equal(await figure(), 0, 'a paused queue needs no workers');
    assert.equal(await exported(), 0);
    await q.query(`SELECT concurrency.resume_queue('emails')`);
    assert.equal(await figure(), 6);
  } finally {
    await fresh.drop();
  }
});
