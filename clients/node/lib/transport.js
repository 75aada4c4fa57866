'use strict';
// The worker's own use of the connection: the completing message (several
// statements in one simple query, read by a Submittable of its own), the
// claims' wait under a statement_timeout, and the protocol's CancelRequest.

const net = require('node:net');
const { protocol, CLAIM_TYPES, claimQuery } = require('./statements');
const { queueError, RacedClaim } = require('./errors');

// The columns of a claim's row as the completing message reads them: where
// each of the task's columns is, and its parser. Rows are built in one
// shape from them (an object filled field by field under names read from
// the reply is a dictionary to V8, slower to build and to read); worked
// out once per worker and set of columns.
const TASK_FIELDS = ['task_id', 'lease_token', 'attempt', 'payload', 'enqueued_at', 'lease_expires_at', 'lease_left'];

class ClaimColumns {
  constructor(fields) {
    // what tells the reply's columns apart, to see that a later reply has
    // the same (compared field by field: a key string made per reply cost
    // its concatenations and number conversions)
    this.names = fields.map((f) => f.name);
    this.types = fields.map((f) => f.dataTypeID);
    this.formats = fields.map((f) => f.format);
    this.at = TASK_FIELDS.map((name) => this.names.indexOf(name));
    this.parsers = this.at.map((i) => (i < 0 ? null : CLAIM_TYPES.getTypeParser(fields[i].dataTypeID, fields[i].format || 'text')));
  }

  matches(fields) {
    const n = this.names.length;
    if (fields.length !== n) return false;
    for (let i = 0; i < n; i++) {
      const f = fields[i];
      if (f.name !== this.names[i] || f.dataTypeID !== this.types[i] || f.format !== this.formats[i]) return false;
    }
    return true;
  }

  // the worker's columns if these fields are theirs, else new ones
  static of(fields, known) {
    return known && known.matches(fields) ? known : new ClaimColumns(fields);
  }

  value(values, k) {
    const i = this.at[k];
    if (i < 0) return undefined;
    const v = values[i];
    return v === null ? null : this.parsers[k](v);
  }

  row(values) {
    return {
      task_id: this.value(values, 0),
      lease_token: this.value(values, 1),
      attempt: this.value(values, 2),
      payload: this.value(values, 3),
      enqueued_at: this.value(values, 4),
      lease_expires_at: this.value(values, 5),
      lease_left: this.value(values, 6),
    };
  }
}

// The completing message (see Worker.finish) as node-postgres's Submittable
// (the interface pg-cursor uses): a simple query whose replies are read
// here. It keeps the rows of the message's second statement, the claim,
// parsed as claimQuery parses them, and nothing of the others; it spares
// what node-postgres's Query does for every message and statement (a copy
// of its config, a result object and its parsers per statement, a row
// object per row): the Node.js process's instructions a task of a busy
// slot went from 215 000 to 160 000 (callgrind, the difference between
// drains of 4,000 and 12,000 tasks; the raw loop's: 131 000). Resolves with
// the claim's rows.
class ChainedQuery {
  constructor(text, worker) {
    this.text = text;
    this.worker = worker; // keeps the claim's columns (see ClaimColumns)
    this.statement = 0; // statements the server has completed
    this.columns = null;
    this.rows = [];
    this.failure = null; // a row that could not be parsed
    this.promise = new Promise((resolve, reject) => {
      // node-postgres wraps it where a query_timeout applies
      this.callback = (err, rows) => (err ? reject(chainError(err, this.statement)) : resolve(rows));
    });
  }

  submit(connection) {
    connection.query(this.text);
    return null;
  }

  handleRowDescription(msg) {
    if (this.statement !== 1) return;
    this.columns = this.worker.claimColumns = ClaimColumns.of(msg.fields, this.worker.claimColumns);
  }

  handleDataRow(msg) {
    if (this.statement !== 1 || this.failure) return;
    let row;
    try {
      row = this.columns.row(msg.fields);
    } catch (err) {
      this.failure = err;
      return;
    }
    this.rows.push(row);
  }

  handleCommandComplete() {
    this.statement++;
  }

  handleEmptyQuery() {}

  handleReadyForQuery() {
    if (this.failure) this.callback(this.failure);
    else this.callback(null, this.rows);
  }

  handleError(err) {
    this.callback(err);
  }

  // a simple query of these statements never gets these replies
  handlePortalSuspended() {}
  handleCopyInResponse(connection) {
    connection.sendCopyFail('the completing message does not copy');
  }
  handleCopyData() {}
}

// Whether `client` takes a ChainedQuery: node-postgres's own (pg-native's,
// or a client in pipeline mode, which refuses custom queries, take a Query).
const chainable = (client) => !!client.connection && !client.pipeline;

// The completing message's error, `statement` the index of the statement
// that failed: a serialization failure (40001) after the completion, at the
// claim or the COMMIT, is a RacedClaim.
const SERIALIZATION_FAILURE = protocol.sqlstates.serialization_failure;

function chainError(err, statement) {
  if (err && err.code === SERIALIZATION_FAILURE && statement >= 1) return new RacedClaim(err);
  return queueError(err);
}

// Sends the completing message; resolves with the claim's rows (rejects with
// chainError's errors where the client is chainable).
function chainedQuery(client, text, worker) {
  if (!chainable(client)) return claimQuery(client, text).then((results) => results[1].rows);
  const chained = new ChainedQuery(text, worker);
  client.query(chained);
  return chained.promise;
}

// The wait of a claim, ms: the worker's, but shorter than the connection's
// statement_timeout (ms, 0: none), which would end a longer wait with an
// error (57014), a reported error and a new connection each time.
function waitWithin(wait, timeout) {
  if (!(timeout > 0)) return wait;
  return Math.min(wait, Math.max(timeout - protocol.timings.wait_margin_ms, timeout / 2));
}

// Cancels the statement that `client`'s connection is running: the
// protocol's CancelRequest with the connection's backend key, on a
// connection of its own (what psql's ^C sends). Through PgBouncer the key is
// PgBouncer's, which passes the request to the server connection the client
// holds, where pg_cancel_backend(pid) could reach another client's statement.
// The request needs no authentication, so it goes in plain text even where
// the connection uses TLS. Resolves with whether it was sent, once the
// other side has closed the connection.
function sendCancel(client) {
  const { processID, secretKey } = client;
  const p = client.connectionParameters;
  if (processID == null || secretKey == null || !p) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = typeof p.host === 'string' && p.host.startsWith('/')
      ? net.connect(`${p.host}/.s.PGSQL.${p.port}`)
      : net.connect(p.port, p.host);
    let sent = false;
    const done = () => {
      socket.destroy();
      resolve(sent);
    };
    socket.setTimeout(5000, done);
    socket.on('error', done);
    socket.on('close', done);
    socket.on('connect', () => {
      const message = Buffer.alloc(16);
      message.writeInt32BE(16, 0);
      message.writeInt32BE(80877102, 4); // the CancelRequest code
      message.writeInt32BE(processID, 8);
      message.writeInt32BE(secretKey, 12);
      sent = true;
      // and waits for the other side to close, as libpq does: PgBouncer
      // (1.18) fails on a cancel whose client hung up before it was passed on
      socket.write(message);
    });
    socket.on('end', done);
  });
}

module.exports = {
  chainable,
  chainedQuery,
  waitWithin,
  sendCancel,
};
