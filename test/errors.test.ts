import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { it } from 'node:test'
import { ERROR_CODES, StreamSegmentError } from '../lib/errors.js'
import { printable } from '../lib/util/shell-words.js'
import { assertPrintable } from './helpers/assert.js'

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

it("StreamSegmentError.is knows an error of the package's other build (ESM and CommonJS in one process)", () => {
  const require = createRequire(import.meta.url)
  // This test runs from dist/esm/test; the CommonJS build lies beside it.
  const cjs = require('../../cjs/lib/index.js') as typeof import('../lib/index.js')
  assert.notEqual(cjs.StreamSegmentError, StreamSegmentError, 'two builds, two classes')
  const fromCjs = new cjs.StreamSegmentError('ERR_CONFLICT', 'from the CommonJS build')
  const fromEsm = StreamSegmentError.conflict('from the ESM build')
  assert.equal(fromCjs instanceof StreamSegmentError, false)
  assert.equal(StreamSegmentError.is(fromCjs), true)
  assert.equal(StreamSegmentError.is(fromCjs, 'ERR_CONFLICT'), true)
  assert.equal(StreamSegmentError.is(fromCjs, 'ERR_CORRUPT'), false)
  assert.equal(cjs.StreamSegmentError.is(fromEsm, 'ERR_CONFLICT'), true)
  // Only theirs: an Error with the same name and code is not one.
  const lookalike = Object.assign(new Error('x'), { name: 'StreamSegmentError', code: 'ERR_CONFLICT' })
  assert.equal(StreamSegmentError.is(lookalike), false)
  // The mark is not enumerable: a copy of the error's fields (a log line, a spread) does not carry it.
  assert.deepEqual(Object.getOwnPropertySymbols({ ...fromEsm }), [])
})

it('StreamSegmentError.is refuses a code that is none (a typo would never match), naming it', () => {
  const err = StreamSegmentError.notFound('gone')
  assert.equal(StreamSegmentError.is(err, 'ERR_NOT_FOUND'), true)
  assert.equal(StreamSegmentError.is(new Error('x'), 'ERR_NOT_FOUND'), false)
  for (const code of ['ERR_NOTFOUND', 'ENOENT', 'constructor', 5]) {
    assert.throws(
      () => StreamSegmentError.is(err, code as never),
      (e: unknown) =>
        StreamSegmentError.is(e, 'ERR_INVALID_ARGUMENT') &&
        e.message.startsWith('StreamSegmentError.is: code ') &&
        e.message.includes('ERR_NOT_FOUND'),
    )
  }
})

it('a message reaches no terminal with a control character: each is escaped as printable does, once', () => {
  const quoted = '/data/run\x1b[31m\u009b2J\n\r\0\x7f'
  for (const err of [
    StreamSegmentError.notFound(`${quoted}: no container here`),
    new StreamSegmentError('ERR_CORRUPT', `${quoted}/0000000001.0: bad magic`),
    StreamSegmentError.invalidArgument(`option x = ${quoted}`),
  ]) {
    assertPrintable(err.message)
    assert.ok(err.message.includes('/data/run\\x1b[31m\\x9b2J\\n\\r\\x00\\x7f'), err.message)
    assertPrintable(String(err.stack).split('\n    at ')[0] as string, String(err.stack))
  }
  // A message quoting another error's, already escaped, is escaped no further: a backslash is kept.
  const inner = StreamSegmentError.store(`${quoted}: EIO`)
  const outer = StreamSegmentError.store(`flush failed: ${inner.message}`, inner)
  assert.equal(outer.message, `flush failed: ${printable(quoted)}: EIO`)
  assert.equal(StreamSegmentError.notFound('C:\\dir\\x1b').message, 'C:\\dir\\x1b')
})
