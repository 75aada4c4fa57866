'use strict';
// Who may see the dashboard: a bearer token (--token, or the environment
// variable CONCURRENCY_DASHBOARD_TOKEN) or HTTP basic authentication
// (--user, with the password in CONCURRENCY_DASHBOARD_PASSWORD). Every
// request without it gets 401 (with WWW-Authenticate for basic), the page
// and its files too. The page itself, once in, needs nothing more: a
// browser sends basic credentials again by itself, and a token given as
// ?token=... in the first address is kept in an HttpOnly, SameSite=Strict
// cookie of this host.
const crypto = require('node:crypto');

const COOKIE = 'concurrency_dashboard';

function same(a, b) {
  const x = crypto.createHash('sha256').update(String(a)).digest();
  const y = crypto.createHash('sha256').update(String(b)).digest();
  return crypto.timingSafeEqual(x, y);
}

function cookies(header) {
  const out = {};
  for (const part of String(header || '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0) out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

class Auth {
  // options: token, user, password (a user without a password is refused)
  constructor({ token, user, password } = {}) {
    if (token !== undefined && token !== null && token.length < 16) {
      throw new Error('the token must have at least 16 characters');
    }
    if (user && !password) throw new Error('--user needs a password in CONCURRENCY_DASHBOARD_PASSWORD');
    if (user && user.includes(':')) throw new Error('the user name must not contain ":"');
    this.token = token || null;
    this.user = user || null;
    this.password = password || null;
    // the cookie holds a value derived from the token, never the token
    this.cookieValue = this.token ? crypto.createHmac('sha256', this.token).update(COOKIE).digest('hex') : null;
  }

  get mode() {
    if (this.token && this.user) return 'token or basic';
    if (this.token) return 'token';
    if (this.user) return 'basic';
    return 'none';
  }

  // null when the request may pass; otherwise { status, headers, message }.
  // url: the request's URL; setCookie(value) is called for a ?token= that
  // matched, so that the page's later requests carry the cookie.
  check(req, url, setCookie) {
    if (!this.token && !this.user) return null;
    const header = req.headers.authorization || '';
    if (this.token) {
      const bearer = /^Bearer\s+(\S+)$/i.exec(header);
      if (bearer && same(bearer[1], this.token)) return null;
      const c = cookies(req.headers.cookie)[COOKIE];
      if (c && same(c, this.cookieValue)) return null;
      const q = url.searchParams.get('token');
      if (q !== null && same(q, this.token)) {
        setCookie(`${COOKIE}=${this.cookieValue}; HttpOnly; SameSite=Strict; Path=/`);
        return null;
      }
    }
    if (this.user) {
      const basic = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header);
      if (basic) {
        const text = Buffer.from(basic[1], 'base64').toString('utf8');
        const i = text.indexOf(':');
        // both compared, whichever differs
        const userOk = i >= 0 && same(text.slice(0, i), this.user);
        const passwordOk = i >= 0 && same(text.slice(i + 1), this.password);
        if (userOk && passwordOk) return null;
      }
    }
    const headers = {};
    if (this.user) headers['WWW-Authenticate'] = 'Basic realm="concurrency_ext dashboard", charset="UTF-8"';
    else headers['WWW-Authenticate'] = 'Bearer realm="concurrency_ext dashboard"';
    return { status: 401, headers, message: 'authentication required' };
  }
}

module.exports = { Auth, COOKIE };
