import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { it } from 'node:test'
import fc from 'fast-check'
import { crc32, crc32Implementation, crc32Implementations } from '../../lib/util/crc32.js'

const crc32js = createRequire(import.meta.url)('crc-32') as { buf(b: Uint8Array, seed?: number): number }

it('the chosen implementation is the first (fastest) one available', () => {
  assert.equal(crc32Implementation, crc32Implementations[0]?.name)
  assert.ok(
    crc32Implementations.some((i) => i.name === 'crc-32'),
    'the portable fallback is always present',
  )
})

it('check value: CRC-32 of "123456789" is 0xcbf43926 in every implementation', () => {
  for (const { name, fn } of crc32Implementations) {
    assert.equal(fn(new TextEncoder().encode('123456789')), 0xcbf43926, name)
  }
})

it('every implementation agrees with crc-32, whole and continued from a seed', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 9000 }), fc.nat({ max: 9000 }), (bytes, cut) => {
      const want = crc32js.buf(bytes) >>> 0
      const at = Math.min(cut, bytes.length)
      for (const { name, fn } of crc32Implementations) {
        assert.equal(fn(bytes), want, name)
        assert.equal(fn(bytes.subarray(at), fn(bytes.subarray(0, at))), want, `${name} continued at ${at}`)
      }
      assert.equal(crc32(bytes), want)
    }),
    { numRuns: 300 },
  )
})
