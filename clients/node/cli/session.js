'use strict';
// One connection for a command of the command line, and the way each of its
// statements runs: parameterised (nothing a user types is ever part of the
// SQL text), in a transaction of its own with lock_timeout and
// statement_timeout set LOCAL, so that a command never hangs behind a lock
// and leaves no setting behind on a pooled server connection.
const pg = require('pg');

const LOCK_TIMEOUT = '10s';
const STATEMENT_TIMEOUT = '60s';

// An error the command reports and ends with exit code 3 (the server, or
// the way to it, failed us; a usage error is exit code 2).
class CommandError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'CommandError';
    // a server's SQLSTATE; node's own codes (ECONNREFUSED) are no SQLSTATE
    this.sqlstate = /^[0-9A-Z]{5}$/.test(code ?? '') ? code : undefined;
  }
}

class Session {
  constructor(client) {
    this.client = client;
  }

  // url: a connection string; without one, node-postgres reads PGHOST,
  // PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ... as libpq does
  static async open(url) {
    let client;
    try {
      client = new pg.Client({ connectionString: url, application_name: 'concurrency-ext' });
      // an error event after connecting (the server went away) surfaces in
      // the next query; without a listener it would end the process
      client.on('error', () => {});
      await client.connect();
    } catch (err) {
      throw new CommandError(`could not connect: ${err.message}`, err.code);
    }
    return new Session(client);
  }

  async close() {
    await this.client.end().catch(() => {});
  }

  // The rows of one statement.
  async rows(text, values = []) {
    const c = this.client;
    try {
      await c.query('BEGIN');
      await c.query(`SELECT pg_catalog.set_config('lock_timeout', $1, true),
                            pg_catalog.set_config('statement_timeout', $2, true)`,
                    [LOCK_TIMEOUT, STATEMENT_TIMEOUT]);
      const { rows } = await c.query(text, values);
      await c.query('COMMIT');
      return rows;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {});
      throw new CommandError(err.message, err.code);
    }
  }
}

module.exports = { Session, CommandError };
