'use strict';
// What the browser tests share: a superuser connection to the cluster that
// test/run.sh started (PGHOST, PGPORT), dashboards started as a user starts
// them (the bin, as a child process), headless Chromium, and waiting for a
// condition instead of sleeping.
const { spawn } = require('node:child_process');
const path = require('node:path');
const pg = require('pg');
const { chromium } = require('playwright-core');

const BIN = path.join(__dirname, '..', 'bin', 'concurrency-ext-dashboard.js');
// the worker runtime's command, whose "dashboard" runs this package
const NODE_CLIENT_BIN = path.join(__dirname, '..', '..', 'node', 'bin', 'concurrency-ext.js');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

function admin() {
  return new pg.Client({ database: process.env.PGDATABASE || 'postgres' });
}

function databaseUrl(role, password) {
  const auth = password ? `${encodeURIComponent(role)}:${encodeURIComponent(password)}` : encodeURIComponent(role);
  return `postgresql://${auth}@/${process.env.PGDATABASE || 'postgres'}?host=${encodeURIComponent(process.env.PGHOST)}&port=${process.env.PGPORT}`;
}

// Starts the dashboard's bin (or another command line that runs it), with
// `env` added to the environment;
// resolves to { url, stop() } once it listens.
function startDashboard(args, command = [BIN], env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...command, '--port', '0', ...args],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    child.stdout.on('data', (d) => {
      out += d;
      const m = /on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(out);
      if (m) {
        resolve({
          url: m[1],
          stderr: () => err,
          stop: () => new Promise((done) => {
            if (child.exitCode !== null) return done();
            child.once('exit', done);
            child.kill('SIGTERM');
          }),
        });
      }
    });
    child.once('exit', (code) => reject(new Error(`dashboard exited with ${code}: ${err}`)));
  });
}

async function launchBrowser() {
  // as root (CI), Chromium runs only without its sandbox
  const args = process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [];
  return chromium.launch({ executablePath: CHROMIUM, args });
}

// Opens the page and waits for its first update; collects console errors
// (a Content-Security-Policy violation shows there).
async function openPage(browser, url, options = {}) {
  const page = await browser.newPage({ ...options, viewport: { width: 1280, height: 800 } });
  page.consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') page.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => page.consoleErrors.push(String(e)));
  await page.goto(url);
  await waitForUpdate(page);
  return page;
}

// Waits until the page has drawn a state read after this call began.
async function waitForUpdate(page) {
  const seen = await page.evaluate(() => (window.dashboard ? window.dashboard.updates : 0));
  await page.waitForFunction((n) => window.dashboard && window.dashboard.updates > n + 1 && window.dashboard.state, seen, { timeout: 20000 });
}

// Polls fn until it returns a truthy value (a condition, not a delay).
async function until(fn, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

module.exports = { NODE_CLIENT_BIN, admin, databaseUrl, startDashboard, launchBrowser, openPage, waitForUpdate, until };
