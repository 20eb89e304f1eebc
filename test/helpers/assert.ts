/** Assertions and small tools the tests share: errors by code, text with no control character, draining a stream, debug lines. */
import assert from 'node:assert/strict'
import { format } from 'node:util'
import createDebug from 'debug'
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

/** `text` (a message, a debug line, a word for a shell) holds no C0 or C1 control character nor DEL raw. */
export function assertPrintable(text: string, what = JSON.stringify(text)): void {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what must not be there
  assert.doesNotMatch(text, /[\u0000-\u001f\u007f-\u009f]/, what)
}

/**
 * The lines `fn` logs under the debug namespaces `namespaces` (as `DEBUG` takes them), each
 * as debug's own log formats it; the namespaces enabled before are enabled again after.
 */
export async function debugLines(namespaces: string, fn: () => Promise<void>): Promise<string[]> {
  const lines: string[] = []
  const { log } = createDebug
  const enabled = createDebug.disable()
  createDebug.enable(namespaces)
  createDebug.log = (...args: unknown[]) => void lines.push(format(...args))
  try {
    await fn()
  } finally {
    createDebug.log = log
    createDebug.enable(enabled)
  }
  return lines
}

/** Every chunk of a stream (or any async iterable of bytes), joined. */
export async function drain(rs: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of rs) chunks.push(Buffer.from(c as Uint8Array))
  return Buffer.concat(chunks)
}
