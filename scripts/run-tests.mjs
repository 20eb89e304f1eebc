// Runs every compiled test file (dist/esm/test/**/*.test.js) under node:test.
// Arguments filter the files by substring: `npm test -- format store`.
// The node:test summary (# pass / # fail) is the last thing printed.
import { spawnSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'

function find(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? find(join(dir, e.name)) : e.name.endsWith('.test.js') ? [join(dir, e.name)] : [],
  )
}

const filters = process.argv.slice(2)
const files = find('dist/esm/test')
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort()
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`)
  process.exit(1)
}
const r = spawnSync(
  process.execPath,
  ['--enable-source-maps', '--test', '--test-reporter=spec', '--test-concurrency=2', ...files],
  {
    stdio: 'inherit',
  },
)
process.exit(r.status ?? 1)
