'use strict';
// Shared by the tests: pools on the server the runner started (PG*
// variables), a fresh queue per test, a results table the handlers write to.
const pg = require('pg');

let counter = 0;

function pool(options = {}) {
  return new pg.Pool({ max: 10, ...options });
}

// A pool through the PgBouncer the runner started, or null without one.
function bouncerPool(options = {}) {
  if (!process.env.PGBOUNCER_PORT) return null;
  return new pg.Pool({
    host: process.env.PGBOUNCER_HOST,
    port: Number(process.env.PGBOUNCER_PORT),
    database: process.env.PGBOUNCER_DATABASE,
    max: 10,
    ...options,
  });
}

// Creates a queue (and a results table of the same name) for one test.
async function freshQueue(db, prefix, settings = "lease => '30 seconds'") {
  const name = `${prefix}_${process.pid}_${++counter}`;
  await db.query(`SELECT concurrency.create_queue('${name}', ${settings})`);
  await db.query(`CREATE TABLE "r_${name}" (task_id bigint, attempt integer, payload jsonb)`);
  return name;
}

// Resolves once check() is truthy (polled; the tests await conditions, not times).
async function until(check, what, limit = 30000) {
  const start = Date.now();
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() - start > limit) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// A promise with its resolver, for handlers the test lets go.
function gate() {
  let open;
  const promise = new Promise((r) => (open = r));
  return { promise, open };
}

// A database of one test's own (the extension created in it unless
// extension is false), for checks that look at a whole database; drop()
// ends its pool and drops it.
async function freshDatabase(db, prefix, { extension = true } = {}) {
  const name = `${prefix}_${process.pid}_${++counter}`;
  await db.query(`CREATE DATABASE "${name}"`);
  const own = new pg.Pool({ max: 4, database: name });
  own.on('error', () => {}); // an idle connection ended by the DROP below
  if (extension) await own.query('CREATE EXTENSION concurrency_ext');
  const drop = async () => {
    await own.end();
    await db.query(`DROP DATABASE "${name}" WITH (FORCE)`);
  };
  return { name, pool: own, drop };
}

module.exports = { pool, bouncerPool, freshQueue, freshDatabase, until, gate };
