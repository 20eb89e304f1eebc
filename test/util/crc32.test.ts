import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { it } from 'node:test'
import fc from 'fast-check'
import { crc32, crc32Chunks, crc32Implementation, crc32Implementations } from '../../lib/util/crc32.js'

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

it('crc32Chunks: each block of bytes cut into chunks anywhere has its own CRC-32', () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 1, maxLength: 5000 }),
      fc.array(fc.nat({ max: 5000 }), { maxLength: 8 }),
      fc.constantFrom(16, 512, 1024),
      (bytes, cuts, blockSize) => {
        const at = [...new Set(cuts.map((c) => c % bytes.length))].sort((a, b) => a - b)
        const chunks = [0, ...at].map((from, i) => bytes.subarray(from, [...at, bytes.length][i]))
        const n = Math.ceil(bytes.length / blockSize)
        const got = new Uint32Array(n + 1).fill(0xdeadbeef)
        crc32Chunks(chunks, blockSize, got)
        for (let b = 0; b < n; b++) {
          assert.equal(got[b], crc32(bytes.subarray(b * blockSize, (b + 1) * blockSize)), `block ${b}`)
        }
        assert.equal(got[n], 0xdeadbeef, 'nothing written past the last block')
      },
    ),
  )
})
