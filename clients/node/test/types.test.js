'use strict';
// index.d.ts against a program written with it (test/types/usage.ts):
// `tsc --noEmit` (TypeScript is a devDependency only).
const test = require('node:test');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

test('index.d.ts type-checks a program that uses every export', () => {
  const tsc = path.join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  execFileSync(process.execPath, [tsc, '--noEmit', '-p', path.join(__dirname, 'types')], { stdio: 'inherit' });
});
