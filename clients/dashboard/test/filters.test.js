'use strict';
// The search filter and the authentication check, without a server.
const assert = require('node:assert/strict');
const { test } = require('node:test');
const { parseFilter, likeSubstring, BadRequest } = require('../lib/search');
const { Auth } = require('../lib/auth');

test('a search filter becomes parameters: JSON parsed, LIKE wildcards escaped, states checked', () => {
  const f = parseFilter({ queue: 'q"x', state: 'dead', payload: ' {"a": [1]} ', error: '50%_off\\' });
  assert.deepEqual(f.params, ['dead', '{"a":[1]}', '%50\\%\\_off\\\\%']);
  assert.equal(f.where.length, 3);
  assert.ok(f.where.every((w) => !w.includes('q"x') && !w.includes('50')), 'no value in the SQL text');
  assert.equal(likeSubstring('a_b'), '%a\\_b%');
  assert.deepEqual(parseFilter({ queue: 'q' }).params, []);
  for (const [input, message] of [
    [{}, /queue is required/],
    [{ queue: 'q', payload: '{nope' }, /payload is not valid JSON/],
    [{ queue: 'q', state: "dead' OR true" }, /state must be one of/],
    [{ queue: 'q', error: 'x'.repeat(1001) }, /at most 1000/],
  ]) {
    assert.throws(() => parseFilter(input), (err) => err instanceof BadRequest && err.status === 400 && message.test(err.message));
  }
});

test('authentication: none, a token (header, cookie, ?token=), basic', () => {
  const req = (headers) => ({ headers });
  const url = (q = '') => new URL(`http://127.0.0.1/${q}`);
  assert.equal(new Auth({}).check(req({}), url(), () => {}), null);
  const t = new Auth({ token: 'x'.repeat(20) });
  const refused = t.check(req({}), url(), () => {});
  assert.equal(refused.status, 401);
  assert.match(refused.headers['WWW-Authenticate'], /^Bearer/);
  assert.equal(t.check(req({ authorization: `Bearer ${'x'.repeat(20)}` }), url(), () => {}), null);
  assert.equal(t.check(req({ authorization: `Bearer ${'x'.repeat(19)}` }), url(), () => {}).status, 401);
  let cookie = null;
  assert.equal(t.check(req({}), url(`?token=${'x'.repeat(20)}`), (c) => { cookie = c; }), null);
  assert.match(cookie, /HttpOnly; SameSite=Strict/);
  assert.ok(!cookie.includes('x'.repeat(20)), 'the cookie is not the token');
  assert.equal(t.check(req({ cookie: cookie.split(';')[0] }), url(), () => {}), null);
  assert.throws(() => new Auth({ token: 'short' }), /at least 16/);
  const b = new Auth({ user: 'ops', password: 'pw' });
  const basic = (u, p) => `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}`;
  assert.equal(b.check(req({ authorization: basic('ops', 'pw') }), url(), () => {}), null);
  assert.equal(b.check(req({ authorization: basic('ops', 'pw2') }), url(), () => {}).status, 401);
  assert.equal(b.check(req({ authorization: basic('op', 'pw') }), url(), () => {}).status, 401);
  assert.match(b.check(req({}), url(), () => {}).headers['WWW-Authenticate'], /^Basic realm=/);
  assert.throws(() => new Auth({ user: 'ops' }), /needs a password/);
});
