import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'
import { ERROR_CODES, StreamSegmentError } from '../lib/errors.js'

it('codes, retryable, cause and predicates', () => {
  const cause = new Error('socket hang up')
  const e = StreamSegmentError.store('put 0000000001.1 failed', cause)
  assert.equal(e.code, 'ERR_STORE')
  assert.equal(e.retryable, true)
  assert.equal(e.cause, cause)
  assert.ok(e instanceof Error)
  assert.ok(StreamSegmentError.is(e, 'ERR_STORE'))
  assert.ok(!StreamSegmentError.is(e, 'ERR_CONFLICT'))
  assert.ok(!StreamSegmentError.is(cause))
  assert.equal(StreamSegmentError.corrupt('x').retryable, false)
})

it('docs/api.md lists every error code with its retryability', () => {
  const api = readFileSync('docs/api.md', 'utf8')
  const errors = api.slice(api.indexOf('\n## Errors\n'))
  for (const [code, { retryable }] of Object.entries(ERROR_CODES)) {
    const row = errors.split('\n').find((l) => l.startsWith(`| \`${code}\``))
    assert.ok(row, `docs/api.md, Errors, has no row for ${code}`)
    assert.match(row, retryable ? /\|\s*yes\s*\|/ : /\|\s*no\s*\|/, `${code} retryable=${retryable}: ${row}`)
  }
})
