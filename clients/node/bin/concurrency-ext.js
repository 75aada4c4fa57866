#!/usr/bin/env node
'use strict';
// npx concurrency-ext doctor | stats | retry | cancel | drain  (cli/main.js)
// npx concurrency-ext dashboard --database URL [--port N] [--allow-actions]
// The dashboard is a package of its own (concurrency-ext-dashboard, in
// clients/dashboard), so that a worker does not install its drawing
// libraries: this command runs it where it is installed, or from the
// repository's checkout beside this package.
const fs = require('node:fs');
const path = require('node:path');

function dashboardBin() {
  try {
    return require.resolve('concurrency-ext-dashboard/bin/concurrency-ext-dashboard.js');
  } catch {
    const beside = path.join(__dirname, '..', '..', 'dashboard', 'bin', 'concurrency-ext-dashboard.js');
    return fs.existsSync(beside) ? beside : null;
  }
}

const [command, ...args] = process.argv.slice(2);
if (command === 'dashboard') {
  const bin = dashboardBin();
  if (!bin) {
    process.stderr.write('the dashboard is the package concurrency-ext-dashboard: npm install concurrency-ext-dashboard\n');
    process.exit(2);
  }
  require(bin).main(args);
} else {
  require('../cli/main').main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  }, (err) => {
    process.stderr.write(`concurrency-ext: ${err.stack}\n`);
    process.exitCode = 3;
  });
}
