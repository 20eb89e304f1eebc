/** Assertions and small tools the tests share: errors by code, draining a stream. */
import assert from 'node:assert/strict'
import { type ErrorCode, StreamSegmentError } from '../../lib/errors.js'

/** `p` rejects with a StreamSegmentError of `code` (whose message matches `message`); returns it. */
export async function rejectsCode(
  p: Promise<unknown>,
  code: ErrorCode | string,
  message?: RegExp,
): Promise<StreamSegmentError> {
  try {
    await p
  } catch (err) {
    assert.ok(StreamSegmentError.is(err), `expected a StreamSegmentError, got ${err}`)
    assert.equal(err.code, code, `expected ${code}, got ${err.code}: ${err.message}`)
    if (message) assert.match(err.message, message)
    return err
  }
  assert.fail(`expected ${code}, but it succeeded`)
}

/** `fn` throws a StreamSegmentError with `code` whose message contains every one of `parts`. */
export function throwsCode(fn: () => unknown, code: ErrorCode, ...parts: (string | RegExp)[]): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof StreamSegmentError, `expected a StreamSegmentError, got ${String(err)}`)
    assert.equal(err.code, code, err.message)
    for (const p of parts) {
      assert.ok(typeof p === 'string' ? err.message.includes(p) : p.test(err.message), `"${err.message}" lacks ${p}`)
    }
    return true
  })
}

/** Every chunk of a stream (or any async iterable of bytes), joined. */
export async function drain(rs: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of rs) chunks.push(Buffer.from(c as Uint8Array))
  return Buffer.concat(chunks)
}
