#!/usr/bin/env node
'use strict';
// npx concurrency-ext-dashboard --database URL [--port N] [--allow-actions]
const { parseArgs } = require('node:util');
const { Dashboard } = require('../lib/server');

const USAGE = `usage: concurrency-ext-dashboard [--database URL] [--port N] [--allow-actions]
                                  [--refresh SECONDS] [--sample SECONDS] [--history-hours N]
                                  [--token TOKEN | --user NAME] [--public-host HOST]...

Serves a page on http://127.0.0.1:PORT/ (default 8431; 0 picks a free port)
that shows the queues, dead, retrying and running tasks, schedules, the lock
tree and the lock history of one database, read as the role that URL logs in
with. Without --database, DATABASE_URL, then the PG* variables (PGHOST,
PGUSER, PGPASSWORD, ...) say where: a password in the environment stays out
of the process list.

  --allow-actions   offer and accept retry (retry_dead) and cancel; they still
                    need permission manage on the queue
  --refresh N       the page polls every N seconds (default 2)
  --sample N        a throughput sample of queue_stats every N seconds (default 10),
                    where the extension keeps no samples (queue_stats_history)
  --history-hours N the charts show the last N hours of the extension's samples
                    (default 6)
  --token TOKEN     every request needs it (Authorization: Bearer TOKEN, or
                    ?token=TOKEN once in the browser); or the environment
                    variable CONCURRENCY_DASHBOARD_TOKEN
  --user NAME       every request needs HTTP basic authentication as NAME with
                    the password in CONCURRENCY_DASHBOARD_PASSWORD
  --public-host H   also answer requests addressed to host H (with :port where
                    it is not 80 or 443): the name a reverse proxy forwards`;

function main(argv) {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        database: { type: 'string' },
        port: { type: 'string', default: '8431' },
        'allow-actions': { type: 'boolean', default: false },
        refresh: { type: 'string', default: '2' },
        sample: { type: 'string', default: '10' },
        'history-hours': { type: 'string', default: '6' },
        token: { type: 'string' },
        user: { type: 'string' },
        'public-host': { type: 'string', multiple: true, default: [] },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }).values;
  } catch (err) {
    process.stderr.write(`${err.message}\n${USAGE}\n`);
    return process.exit(2);
  }
  if (args.help) return process.stdout.write(`${USAGE}\n`);
  const number = (name, min, max) => {
    const v = Number(args[name]);
    if (!Number.isInteger(v) || v < min || v > max) {
      process.stderr.write(`--${name} must be an integer from ${min} to ${max}\n`);
      process.exit(2);
    }
    return v;
  };
  const hostPattern = /^[a-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9a-f:.]+\](:[0-9]{1,5})?$/i;
  for (const h of args['public-host']) {
    if (!hostPattern.test(h)) {
      process.stderr.write(`--public-host ${JSON.stringify(h)}: a host name, with :port where not 80 or 443\n`);
      process.exit(2);
    }
  }
  let dashboard;
  try {
    dashboard = new Dashboard({
      databaseUrl: args.database || process.env.DATABASE_URL || undefined,
      port: number('port', 0, 65535),
      allowActions: args['allow-actions'],
      refreshSeconds: number('refresh', 1, 3600),
      sampleSeconds: number('sample', 1, 3600),
      historyHours: number('history-hours', 1, 24 * 31),
      token: args.token || process.env.CONCURRENCY_DASHBOARD_TOKEN || undefined,
      user: args.user,
      password: process.env.CONCURRENCY_DASHBOARD_PASSWORD,
      publicHosts: args['public-host'],
    });
  } catch (err) {
    process.stderr.write(`concurrency-ext-dashboard: ${err.message}\n`);
    return process.exit(2);
  }
  dashboard.start().then((url) => {
    process.stdout.write(`concurrency-ext dashboard on ${url} (actions ${args['allow-actions'] ? 'on' : 'off'}, `
      + `authentication ${dashboard.auth.mode})\n`);
  }, (err) => {
    // pg's messages name the host, role and database, never the password
    process.stderr.write(`concurrency-ext-dashboard: ${err.message}\n`);
    process.exit(1);
  });
  const stop = () => dashboard.close().then(() => process.exit(0), () => process.exit(1));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

if (require.main === module) main(process.argv.slice(2));
module.exports = { main };
