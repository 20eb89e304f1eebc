import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { checkKey, compareKeys, joinBody } from '../../lib/store/common.js'
import { throwsCode } from '../helpers/assert.js'

const MiB = 1024 * 1024
const patterned = (n: number, seed: number) =>
  Buffer.from(Uint8Array.from({ length: n }, (_, i) => (i * 7 + seed) & 255))

describe('joinBody', () => {
  it('gives one buffer as it is, and several joined in order', () => {
    const one = patterned(1000, 1)
    assert.equal(joinBody(one).bytes, one)
    assert.equal(joinBody([one]).bytes, one)
    const parts = [patterned(3 * MiB + 5, 2), patterned(0, 3), patterned(MiB - 1, 4)]
    const joined = joinBody(parts)
    assert.deepEqual(Buffer.from(joined.bytes), Buffer.concat(parts))
    joined.release()
  })

  it('a buffer given back is joined into again for a body of the same MiB count, never while lent', () => {
    const a = joinBody([patterned(5 * MiB + 1, 5), patterned(100, 6)])
    const b = joinBody([patterned(5 * MiB + 1, 7), patterned(100, 8)])
    assert.notEqual(b.bytes.buffer, a.bytes.buffer, 'a is still lent out')
    const aMemory = a.bytes.buffer
    a.release()
    const other = joinBody([patterned(2 * MiB, 9), patterned(1, 10)])
    assert.notEqual(other.bytes.buffer, aMemory, 'a 3 MiB body does not take a 6 MiB buffer')
    const parts = [patterned(6 * MiB - 10, 11), patterned(10, 12)]
    const c = joinBody(parts)
    assert.equal(c.bytes.buffer, aMemory, 'a 6 MiB body does')
    assert.deepEqual(Buffer.from(c.bytes), Buffer.concat(parts))
    for (const x of [b, other, c]) x.release()
  })
})

describe('checkKey', () => {
  it('refuses a key with a lone surrogate (no UTF-8 form: it would be stored as U+FFFD), takes a pair', () => {
    for (const k of ['a\uD800', '\uDC00', 'x\uDBFFy', 'x/\uDFFF/y', '\uDE00\uD83D']) {
      throwsCode(() => checkKey(k), 'ERR_INVALID_ARGUMENT', 'invalid key')
    }
    for (const k of ['a\u{1F600}', '\uD83D\uDE00/x', 'a\uFFFD', 'a\uFF01']) checkKey(k)
  })

  it("counts a key's length in UTF-8 bytes, S3's unit: 1024 of them, in characters of 1 to 4 bytes", () => {
    for (const [ch, bytes] of [
      ['x', 1],
      ['\u00E9', 2],
      ['\u20AC', 3],
      ['\u{1F600}', 4],
    ] as const) {
      // 1024 bytes ending in the character: 'x' pads when 1024 is no multiple of its bytes.
      const most = 'x'.repeat(1024 % bytes) + ch.repeat(Math.floor(1024 / bytes))
      assert.equal(Buffer.byteLength(most), 1024)
      assert.ok(most.length <= 1024)
      checkKey(most)
      throwsCode(() => checkKey(`${most}y`), 'ERR_INVALID_ARGUMENT', 'invalid key', '1025 bytes of UTF-8', '1024')
    }
    // 1000 characters of 2 bytes: under 1024 UTF-16 code units, 2000 bytes.
    throwsCode(() => checkKey('\u00E9'.repeat(1000)), 'ERR_INVALID_ARGUMENT', '2000 bytes of UTF-8')
  })

  it("counts the store's prefix in, which S3 keeps in the same 1024 bytes", () => {
    const prefix = 'p\u00E9/'
    checkKey('x'.repeat(1020), prefix)
    throwsCode(
      () => checkKey('\u20AC'.repeat(340) + 'x', prefix),
      'ERR_INVALID_ARGUMENT',
      '1021 bytes of UTF-8, 1025 with the prefix "p\u00E9/"',
    )
  })

  it('says what is wrong with the key, the key shortened when long', () => {
    throwsCode(() => checkKey(''), 'ERR_INVALID_ARGUMENT', 'invalid key "": empty')
    throwsCode(() => checkKey('a/../b'), 'ERR_INVALID_ARGUMENT', 'invalid key "a/../b": it has a ".." segment')
    throwsCode(() => checkKey('/a'), 'ERR_INVALID_ARGUMENT', 'invalid key "/a": it starts with "/"')
    throwsCode(() => checkKey('a/'), 'ERR_INVALID_ARGUMENT', 'invalid key "a/": it has an empty segment')
    throwsCode(() => checkKey('a\0'), 'ERR_INVALID_ARGUMENT', 'invalid key "a\\u0000": it has a NUL character')
    throwsCode(() => checkKey('a\uDC00'), 'ERR_INVALID_ARGUMENT', 'lone surrogate (U+DC00)')
    throwsCode(() => checkKey(7 as unknown as string), 'ERR_INVALID_ARGUMENT', 'key must be a string, got')
    throwsCode(
      () => checkKey(`${'\u{1F600}'.repeat(100)}/..`),
      'ERR_INVALID_ARGUMENT',
      `invalid key "${'\u{1F600}'.repeat(60)}…": it has a ".." segment`,
    )
  })
})

describe('compareKeys', () => {
  it('orders keys by their UTF-8 bytes, as S3 lists them', () => {
    const keys = ['b', 'a\u{1F600}', 'a', 'a\uFF01', 'a\u00E9', 'a/']
    assert.deepEqual([...keys].sort(compareKeys), ['a', 'a/', 'a\u00E9', 'a\uFF01', 'a\u{1F600}', 'b'])
    assert.equal(compareKeys('x', 'x'), 0)
  })
})
