'use strict';
// The statements come from clients/protocol/statements.json: the generated
// copy (lib/protocol.js) is up to date, and no statement text is left in
// the package's own modules.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const protocol = path.join(__dirname, '..', '..', 'protocol');

test('the generated copies of the protocol are up to date', () => {
  execFileSync('python3', [path.join(protocol, 'generate.py'), '--check'], { stdio: 'inherit' });
});

test('no statement is written outside the protocol', () => {
  execFileSync('python3', [path.join(protocol, 'check_sources.py'), 'node'], { stdio: 'inherit' });
});

test('the package reads the protocol it ships', () => {
  const shipped = require('../lib/protocol');
  const source = require('../../protocol/statements.json');
  assert.deepEqual(Object.keys(shipped.statements), Object.keys(source.statements));
  assert.equal(require('..').LEASE_LOST, source.sqlstates.lease_lost);
});

test("inliner's text is inline's, for every statement", () => {
  const { S, inline, inliner } = require('../lib/statements');
  const values = ['q', "it's", 'a\\b', null, 5, '{"k": 1}', undefined, 'x'];
  for (const name of Object.keys(S)) assert.equal(inliner(S[name].sql)(values), inline(S[name].sql, values), name);
  assert.equal(inliner(S.complete.sql)(['q', '1', '2', null]), "SELECT concurrency.complete('q'::text, '1'::bigint, '2'::bigint, NULL::jsonb)");
});
