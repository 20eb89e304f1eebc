// Runs every compiled test file (dist/esm/test/**/*.test.js) under node:test.
// Arguments filter the files by substring: `npm test -- format store`.
//
// The S3 tests need a real S3 server. When AWS_ENDPOINT_URL_S3 is not set and Ceph's
// radosgw is installed, this starts one for the run with test/rgw/rgw.sh (and stops it
// after); otherwise the S3 tests fail and say how to get one. The node:test summary
// (ℹ pass / ℹ fail) is the last thing the runner prints.
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

const env = { ...process.env }
let started = false
const needsS3 = files.some((f) => f.includes('s3'))
if (needsS3 && !env.AWS_ENDPOINT_URL_S3) {
  const has = spawnSync('sh', ['-c', 'command -v radosgw'], { encoding: 'utf8' }).status === 0
  if (has) {
    console.log('# AWS_ENDPOINT_URL_S3 is not set: starting radosgw for this run (test/rgw/rgw.sh start)')
    started = spawnSync('bash', ['test/rgw/rgw.sh', 'start'], { stdio: 'inherit' }).status === 0
    const out = spawnSync('bash', ['test/rgw/rgw.sh', 'env'], { encoding: 'utf8' }).stdout ?? ''
    for (const m of out.matchAll(/^export (\w+)=(.*)$/gm)) env[m[1]] = m[2].replace(/^'(.*)'$/, '$1')
  } else {
    console.log("# radosgw is not installed: the S3 tests will fail (install it with 'bash test/rgw/rgw.sh install')")
  }
}

const r = spawnSync(
  process.execPath,
  ['--enable-source-maps', '--test', '--test-reporter=spec', '--test-concurrency=2', ...files],
  {
    stdio: 'inherit',
    env,
  },
)
if (started) spawnSync('bash', ['test/rgw/rgw.sh', 'stop'], { stdio: 'inherit' })
process.exit(r.status ?? 1)
