// Runs every compiled test file (dist/esm/test/**/*.test.js) under node:test.
// Arguments filter the files by substring: `npm test -- format store`.
//
// The S3 tests need a real S3 server; they never skip. When a selected test file imports the
// S3 helper (test/helpers/s3-env.ts) and AWS_ENDPOINT_URL_S3 is not set, this sets one up for
// the run (scripts/s3-server.mjs): installs radosgw when missing (as root; otherwise one line
// says the command to run, and the exit code is 1), starts it on free ports in a private
// temporary folder, and stops it afterwards, also when the tests fail or on SIGINT / SIGTERM.
// A server given by AWS_ENDPOINT_URL_S3 is used as is. One '# S3: …' line says which.
// The exit code is the test run's; the node:test summary (ℹ pass / ℹ fail) is printed last.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT, run, s3ServerIfNeeded } from './s3-server.mjs'

process.chdir(ROOT)

function find(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? find(join(dir, e.name)) : e.name.endsWith('.test.js') ? [join(dir, e.name)] : [],
  )
}

let all
try {
  all = find('dist/esm/test')
} catch (err) {
  console.error(`no compiled tests in dist/esm/test (${err.code ?? err.message}): run 'npm run build' first`)
  process.exit(1)
}
const filters = process.argv.slice(2)
// The longest files (a minute or more each on 2 cores) start first: left to their place in
// name order, one of them could start last and run alone while the other slot is idle.
const SLOW_FIRST = [
  'benchmarks.test.js',
  'wal/crash.test.js',
  'streams/upload-file-faults-s3.test.js',
  'streams/write-stream-s3-faults.test.js',
  'admin/gc-s3.test.js',
  'store/s3-faults.test.js',
  'read/corruption.test.js',
  'store/s3-conformance.test.js',
  'cli.test.js',
  'streams/resume-s3.test.js',
  'container/multiproc-s3.test.js',
]
const rank = (f) => {
  const i = SLOW_FIRST.findIndex((name) => f.endsWith(`/test/${name}`))
  return i < 0 ? SLOW_FIRST.length : i
}
const files = all
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort()
  .sort((a, b) => rank(a) - rank(b))
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`)
  process.exit(1)
}

// A test file needs S3 when it imports the helper that locates the server.
const s3Files = files.filter((f) => readFileSync(f, 'utf8').includes('s3-env'))
const server = await s3ServerIfNeeded(s3Files.length > 0, 'test file')

// The SDK's notice that its later releases need Node 22 (the package pins one that runs on
// Node 20) would be printed by every test process that loads it: it says nothing about a test.
const env = { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true', ...server.env }
const r = await run(
  process.execPath,
  ['--enable-source-maps', '--test', '--test-reporter=spec', '--test-concurrency=2', ...files],
  { stdio: 'inherit', env },
)
server.stop()
process.exit(r.code ?? 1)
