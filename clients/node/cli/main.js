'use strict';
// The command line concurrency-ext: reads the arguments, opens one
// connection, runs one command and prints its result as text or, with
// --json, as one JSON document on stdout. Exit codes: 0 ok, 1 problems
// found (doctor) or not drained in time (drain), 2 usage error, 3 could not
// connect, or the server refused or failed a statement.
const { parseArgs } = require('node:util');
const { Session, CommandError } = require('./session');
const { doctor } = require('./doctor');
const { stats, retry, cancel, drain } = require('./queue_commands');

const EXIT_USAGE = 2;
const EXIT_FAILED = 3;

const USAGE = `usage: concurrency-ext COMMAND [options]

  doctor                    what is wrong with the server, its queues and their workers
      --xact-age SECONDS      a transaction open longer pins the xmin horizon (default 300)
      --lock-wait SECONDS     a statement waiting longer for a lock is reported (default 30)
      --schedule-lag SECONDS  a schedule this far behind its due time is reported (default 60)
  stats [QUEUE]             task counts per queue (concurrency.queue_stats)
  retry QUEUE ID... | --all dead tasks ready again (concurrency.retry_dead)
  cancel QUEUE ID...        cancel tasks (concurrency.cancel)
  drain QUEUE               wait until no task of the queue is ready, leased or blocked
      --timeout SECONDS       give up after this long, exit code 1 (default 300)
  dashboard ...             the dashboard (concurrency-ext dashboard --help)

options of every command:
  --url URL    where to connect (default: DATABASE_URL, then the PG* variables: PGHOST,
               PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...)
  --json       print the result as JSON
  -h, --help   this text

exit codes: 0 ok; 1 doctor found problems, or drain timed out; 2 usage error;
3 could not connect, or a statement failed (permission, unknown queue, ...)`;

const COMMON = {
  url: { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
};

class UsageError extends Error {}

function seconds(value, name) {
  const n = Number(value);
  if (value === '' || !Number.isFinite(n) || n < 0) throw new UsageError(`--${name}: not a number of seconds: ${value}`);
  return n;
}

function taskIds(values) {
  for (const v of values) if (!/^[0-9]{1,19}$/.test(v)) throw new UsageError(`not a task id: ${v}`);
  return values;
}

// Each command: its options, and how its positionals and options become the
// arguments of its function.
const COMMANDS = {
  doctor: {
    options: { 'xact-age': { type: 'string', default: '300' }, 'lock-wait': { type: 'string', default: '30' },
      'schedule-lag': { type: 'string', default: '60' } },
    args(pos, v) {
      if (pos.length) throw new UsageError('doctor takes no arguments');
      return { xactAge: seconds(v['xact-age'], 'xact-age'), lockWait: seconds(v['lock-wait'], 'lock-wait'),
        scheduleLag: seconds(v['schedule-lag'], 'schedule-lag') };
    },
    run: doctor,
  },
  stats: {
    options: {},
    args(pos) {
      if (pos.length > 1) throw new UsageError('stats takes at most one queue');
      return { queue: pos[0] };
    },
    run: stats,
  },
  retry: {
    options: { all: { type: 'boolean', default: false } },
    args([queue, ...ids], v) {
      if (queue === undefined) throw new UsageError('retry needs a queue');
      if (v.all === (ids.length > 0)) throw new UsageError('retry needs task ids or --all (not both)');
      return { queue, ids: v.all ? null : taskIds(ids) };
    },
    run: retry,
  },
  cancel: {
    options: {},
    args([queue, ...ids]) {
      if (queue === undefined || ids.length === 0) throw new UsageError('cancel needs a queue and task ids');
      return { queue, ids: taskIds(ids) };
    },
    run: cancel,
  },
  drain: {
    options: { timeout: { type: 'string', default: '300' } },
    args(pos, v) {
      if (pos.length !== 1) throw new UsageError('drain needs one queue');
      return { queue: pos[0], timeout: seconds(v.timeout, 'timeout') };
    },
    run: drain,
  },
};

// argv without node and the script; out/err: writable streams. Resolves to
// the exit code.
async function main(argv, out = process.stdout, err = process.stderr) {
  const [name, ...rest] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    (name === undefined ? err : out).write(`${USAGE}\n`);
    return name === undefined ? EXIT_USAGE : 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    err.write(`concurrency-ext: unknown command "${name}"\n${USAGE}\n`);
    return EXIT_USAGE;
  }
  let values;
  let args;
  try {
    const parsed = parseArgs({ args: rest, options: { ...COMMON, ...command.options }, allowPositionals: true });
    values = parsed.values;
    if (values.help) {
      out.write(`${USAGE}\n`);
      return 0;
    }
    args = command.args(parsed.positionals, values);
  } catch (e) {
    if (!(e instanceof UsageError) && !/^ERR_PARSE_ARGS/.test(e.code ?? '')) throw e;
    err.write(`concurrency-ext ${name}: ${e.message}\n${USAGE}\n`);
    return EXIT_USAGE;
  }

  let session;
  try {
    session = await Session.open(values.url ?? process.env.DATABASE_URL);
    const { result, exitCode, text } = await command.run(session, args);
    out.write(values.json ? `${JSON.stringify(result, null, 2)}\n` : `${text}\n`);
    return exitCode;
  } catch (e) {
    if (!(e instanceof CommandError)) throw e;
    if (values.json) out.write(`${JSON.stringify({ error: e.message, sqlstate: e.sqlstate ?? null }, null, 2)}\n`);
    err.write(`concurrency-ext ${name}: ${e.message}${e.sqlstate ? ` (SQLSTATE ${e.sqlstate})` : ''}\n`);
    return EXIT_FAILED;
  } finally {
    if (session) await session.close();
  }
}

module.exports = { main, USAGE };
