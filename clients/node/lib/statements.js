'use strict';
// The statements of clients/protocol/statements.json (lib/protocol.js, its
// generated copy), how their parameters are written, and how node-postgres
// reads their rows.

const pgTypes = require('pg').types;
const protocol = require('./protocol');
const { queueError } = require('./errors');

const S = protocol.statements;

// `text`: a query text, or a node-postgres query config (then no `values`)
async function query(db, text, values) {
  try {
    return await db.query(text, values);
  } catch (err) {
    throw queueError(err);
  }
}

// Milliseconds (a number) or a PostgreSQL interval (a string) as an interval
// parameter; null stays null (the server's default).
function interval(value, name) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a positive number of milliseconds`);
    return `${value} milliseconds`;
  }
  if (typeof value === 'string') return value;
  throw new TypeError(`${name} must be milliseconds (a number) or an interval (a string)`);
}

// A value written into a query text (for the one message that carries
// several statements, which cannot have parameters), NULL for null. Quoted
// as node-postgres's escapeLiteral quotes (quotes doubled; with a
// backslash, an E'' string with backslashes doubled: right whatever
// standard_conforming_strings says), but without its loop that builds the
// text a character at a time: most values need no escape at all. A NUL
// character would end the message early: refused.
const ESCAPED = /['\\\0]/;

function literal(value, cast) {
  if (value === null || value === undefined) return `NULL${cast}`;
  const text = String(value);
  if (!ESCAPED.test(text)) return `'${text}'${cast}`;
  if (text.includes('\0')) throw new TypeError('a value sent to the server cannot contain a NUL character');
  const quoted = text.replace(/'/g, "''");
  return text.includes('\\') ? ` E'${quoted.replace(/\\/g, '\\\\')}'${cast}` : `'${quoted}'${cast}`;
}

// A task id or lease token (bigint, as the claim's text) for a query text:
// digits, checked rather than escaped.
const BIGINT = /^-?[0-9]{1,19}$/;

function bigintText(value) {
  const text = typeof value === 'string' ? value : String(value);
  if (!BIGINT.test(text)) throw new TypeError(`a task id or lease token must be an integer, not ${JSON.stringify(text)}`);
  return text;
}

// A payload of any JSON type. node-postgres would send a JS array as a
// PostgreSQL array (and an object through JSON.stringify anyway): sending
// the JSON text, cast to jsonb, treats every type alike.
function json(value) {
  if (value === undefined) return '{}';
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError('a payload must be a JSON value');
  return text;
}

// Task ids (strings, numbers or bigints) as a bigint[] parameter.
function ids(value) {
  if (!Array.isArray(value)) throw new TypeError('after must be an array of task ids');
  return value.map((id) => (typeof id === 'bigint' ? id.toString() : id));
}

// The text of statement `name` with the named arguments of the options
// that are set (their values pushed onto `values`), so that the server's
// defaults apply to the others. `fields`: option -> [argument, convert].
function withNamed(name, values, fields, options) {
  const types = S[name].named;
  let extra = '';
  for (const option in fields) {
    const value = options[option];
    if (value === undefined) continue;
    const [argument, convert] = fields[option];
    values.push(convert ? convert(value) : value);
    extra += `, ${argument} => $${values.length}::${types[argument]}`;
  }
  return S[name].sql.replace('{named}', extra);
}

// A statement's text with each $n replaced by the quoted value (see
// literal), for the one message that carries several statements.
function inline(sql, values) {
  return sql.replace(/\$([0-9]+)/g, (_, n) => literal(values[n - 1], ''));
}

// inline() of one statement, its text split at each $n once: a call joins
// the parts (inline's replace, a regular expression and a callback a call,
// was the costliest function of the runtime's own in a busy slot's CPU
// profile). The same text as inline's.
function inliner(sql) {
  const parts = sql.split(/\$([0-9]+)/); // text, n, text, …, text
  const at = [];
  for (let i = 1; i < parts.length; i += 2) at.push(Number(parts[i]) - 1);
  return (values) => {
    let text = parts[0];
    for (let i = 0; i < at.length; i++) text += literal(values[at[i]], '') + parts[2 * i + 2];
    return text;
  };
}

const decoded = (text) => (text === null ? null : JSON.parse(text));

// The claims' rows (and enqueue's ids) parsed as node-postgres parses them,
// but bigint always as text: task ids and lease tokens go past 2^53, and an
// application may have told node-postgres to parse int8 as a number
// (pg.types.setTypeParser(20, …)).
// The timestamps stay as the server wrote them: a Task parses them when read
// (most handlers never do; parsing two a task was a tenth of the runtime's
// own JavaScript time in a busy slot, by a CPU profile).
const INT8 = 20;

const TIMESTAMPTZ = 1184;

const asText = (value) => value;

const CLAIM_TYPES = { getTypeParser: (oid, format) => (oid === INT8 || oid === TIMESTAMPTZ ? asText : pgTypes.getTypeParser(oid, format)) };

// a timestamp as node-postgres would have parsed it (a Date, unless the
// application told it otherwise)
const timestamp = (value) => (typeof value === 'string' ? pgTypes.getTypeParser(TIMESTAMPTZ, 'text')(value) : value);

const ISO_TIMESTAMP = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/;

const claimQuery = (db, text, values) => query(db, { text, values, types: CLAIM_TYPES });

// The guard of the claim in the completing message, once it needs one (see
// Worker.finish).
const READ_COMMITTED_ONLY = protocol.fragments.read_committed_only;

module.exports = {
  protocol,
  S,
  query,
  interval,
  literal,
  bigintText,
  json,
  ids,
  withNamed,
  inline,
  inliner,
  decoded,
  CLAIM_TYPES,
  timestamp,
  ISO_TIMESTAMP,
  claimQuery,
  READ_COMMITTED_ONLY,
};
