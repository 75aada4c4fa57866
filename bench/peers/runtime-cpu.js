'use strict';
// What a job costs the Node.js runtime's process, and the server backends
// it talks to, in peers.js's rows (a) and (b) (one worker, concurrency 1 or
// 8, draining jobs whose handler inserts the task's id, as peers.js's
// runtime side does): CPU time, not wall time, so that it holds on a loaded
// machine. Needs only clients/node (and its pg), no peer. PG* variables say
// where the server is (the extension created in that database).
//
//   node bench/peers/runtime-cpu.js [--lib DIR] [--row a|b] [--jobs N]
//        [--warmup N] [--profile FILE] [--count]
//
//   --lib      the clients/node to measure (default: this checkout's), so
//              that two builds can be run in turn against one server
//   --jobs     jobs of the timed drain (default 4000)
//   --warmup   jobs drained first, untimed, in two runs (default --jobs)
//   --profile  a V8 CPU profile of the timed drain only (.cpuprofile)
//   --count    count the messages (a wrapper around each connection's
//              query, which costs CPU of its own: not for CPU figures)
//
// Prints one line of JSON: per job, the process's CPU (client: user +
// system, ms; main: its main thread's), the CPU of the worker's server
// backends (server, and serverSys its system part: /proc/PID/stat utime +
// stime of each connection's backend, ms; USER_HZ ticks, so take several
// runs), and with --count the messages the worker's connections sent
// (client.query calls: a simple query of several statements is one) and
// the statements in them. CPU time moves by 10 % from run to run on a
// loaded machine: alternate the builds compared, and take medians; under
// callgrind (valgrind --tool=callgrind --smc-check=all-non-file node …) the
// difference between two --jobs counts is the instructions a job.
const path = require('node:path');
const fs = require('node:fs');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const LIB = path.resolve(opt('lib', path.join(__dirname, '..', '..', 'clients', 'node')));
const ROW = opt('row', 'a');
const TOTAL = Number(opt('jobs', 4000));
const WARMUP = Number(opt('warmup', TOTAL));
const PROFILE = opt('profile', null);
const COUNT = args.includes('--count');
const CONCURRENCY = { a: 1, b: 8 }[ROW];
// a queue and results table of this process's own: runs side by side do not meet
const QUEUE = `cpu_${process.pid}`;
const RESULTS = `cpu_results_${process.pid}`;
if (!CONCURRENCY) throw new Error('--row is a or b');

const ours = require(LIB);
const pg = require(require.resolve('pg', { paths: [LIB] }));
const db = new pg.Pool({ max: 2 });

const TICK_MS = 1000 / 100; // USER_HZ
// ms of CPU of a process (or thread: PID/task/TID): user + system, or
// `part` 'system' only; the fields after the command's ')' (state = 0)
function procStat(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null; // not on this machine (a remote server): counted as nothing
  }
}
function procCpu(pid, part) {
  const f = procStat(pid);
  if (!f) return 0;
  return (part === 'system' ? Number(f[12]) : Number(f[11]) + Number(f[12])) * TICK_MS; // utime, stime
}

// CPU ms of this process's main thread (the event loop: the rest is V8's
// compiler and GC helpers and libuv's pool)
const mainThread = () => procCpu(`${process.pid}/task/${process.pid}`);

async function drain(jobs) {
  await db.query('SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = $1', [QUEUE]);
  await db.query('SELECT concurrency.create_queue($1)', [QUEUE]);
  for (let c = 0; c < jobs; c += 1000) {
    const n = Math.min(1000, jobs - c);
    await ours.enqueueBatch(db, QUEUE, Array.from({ length: n }, (_, i) => ({ i: c + i })));
  }
  await db.query(`DROP TABLE IF EXISTS ${RESULTS}`);
  await db.query(`CREATE UNLOGGED TABLE ${RESULTS} (job text NOT NULL)`);

  const pool = new pg.Pool({ max: CONCURRENCY + 2 });
  const backends = new Map(); // pid -> CPU ms when it connected
  const backendsSys = new Map(); // pid -> system CPU ms when it connected
  let messages = 0;
  let statements = 0;
  pool.on('connect', (client) => {
    backends.set(client.processID, procCpu(client.processID));
    backendsSys.set(client.processID, procCpu(client.processID, 'system'));
    if (!COUNT) return;
    const q = client.query;
    client.query = function (config, ...rest) {
      messages++;
      const text = typeof config === 'string' ? config : config && config.text;
      statements += typeof text === 'string' ? text.split(';').filter((s) => s.trim() !== '').length : 1;
      return q.call(this, config, ...rest);
    };
  });
  let done = 0;
  let finish;
  const finished = new Promise((r) => (finish = r));
  const insert = `INSERT INTO ${RESULTS} VALUES ($1)`;
  const handler = async (task, client) => {
    await client.query(insert, [task.id]);
  };
  const worker = new ours.Worker({ pool, queue: QUEUE, concurrency: CONCURRENCY, handler });
  worker.on('completed', () => ++done === jobs && finish());
  worker.on('error', (e) => console.error('runtime:', e.message));
  const own = process.cpuUsage();
  const main0 = mainThread();
  await worker.start();
  await finished;
  const cpu = process.cpuUsage(own);
  const main = mainThread() - main0;
  let server = 0;
  let serverSys = 0;
  for (const [pid, at] of backends) server += procCpu(pid) - at;
  for (const [pid, at] of backendsSys) serverSys += procCpu(pid, 'system') - at;
  const counted = { messages, statements };
  await worker.stop();
  await pool.end();
  const { rows } = await db.query(`SELECT count(*)::int AS n, count(DISTINCT job)::int AS d FROM ${RESULTS}`);
  if (rows[0].n !== jobs || rows[0].d !== jobs) throw new Error(`${rows[0].n} handled, ${rows[0].d} distinct of ${jobs}`);
  return {
    client: (cpu.user + cpu.system) / 1000 / jobs,
    user: cpu.user / 1000 / jobs,
    main: main / jobs,
    server: server / jobs,
    serverSys: serverSys / jobs,
    messages: counted.messages / jobs,
    statements: counted.statements / jobs,
  };
}

async function profiled(fn) {
  if (!PROFILE) return fn();
  const inspector = require('node:inspector');
  const session = new inspector.Session();
  session.connect();
  const post = (method, params) => new Promise((res, rej) => session.post(method, params, (e, r) => (e ? rej(e) : res(r))));
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 100 });
  await post('Profiler.start');
  try {
    return await fn();
  } finally {
    const { profile } = await post('Profiler.stop');
    fs.writeFileSync(PROFILE, JSON.stringify(profile));
    session.disconnect();
  }
}

(async () => {
  if (WARMUP > 0) {
    await drain(Math.ceil(WARMUP / 2));
    await drain(Math.floor(WARMUP / 2));
  }
  const r = await profiled(() => drain(TOTAL));
  await db.query('SELECT concurrency.drop_queue($1)', [QUEUE]);
  await db.query(`DROP TABLE ${RESULTS}`);
  await db.end();
  console.log(JSON.stringify({ row: ROW, jobs: TOTAL, ...Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Number(v.toFixed(4))])) }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
