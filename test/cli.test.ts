import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'

const bin = 'bin/stream-segment.cjs'
const run = (...args: string[]) => spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8' })

it('--version prints the package version', () => {
  const r = run('--version')
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.stdout.trim(), JSON.parse(readFileSync('package.json', 'utf8')).version)
})

it('--help prints usage and exits 0; no arguments exits 2', () => {
  const r = run('--help')
  assert.equal(r.status, 0)
  assert.match(r.stdout, /^Usage: stream-segment <command>/)
  assert.equal(run().status, 2)
})

it('an unknown command is a one-line error with its code, no stack', () => {
  const r = run('frobnicate')
  assert.equal(r.status, 2)
  assert.equal(
    r.stderr,
    'stream-segment: ERR_INVALID_ARGUMENT: unknown command "frobnicate" (see stream-segment --help)\n',
  )
})
