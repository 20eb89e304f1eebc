/**
 * The dependency rule of lib/ (lib/index.ts), as `npm run lint` checks it: the checker
 * finds one violation of each kind in a small tree made to break them, and none in lib/.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { it } from 'node:test'

const run = (...args: string[]) =>
  spawnSync(process.execPath, ['scripts/check-deps.mjs', ...args], { encoding: 'utf8', timeout: 60_000 })

it('the checker reports an upward import, admin/ reading through write/, a store call outside container/ and a cycle', () => {
  const r = run('--self-test')
  assert.equal(r.status, 0, r.stdout + r.stderr)
  for (const want of [/format may not import write/, /admin\/ reads through/, /calls s\.get\(\)/, /import cycle/]) {
    assert.match(r.stdout, want)
  }
})

it('lib/ keeps the dependency rule', () => {
  const r = run()
  assert.equal(r.status, 0, r.stdout + r.stderr)
  assert.match(r.stdout, /lib\/ keeps the dependency rule/)
})
