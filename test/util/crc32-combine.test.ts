import assert from 'node:assert/strict'
import { it } from 'node:test'
import fc from 'fast-check'
import { crc32, crc32Combine, crc32OfBlocks, crc32Shift } from '../../lib/util/crc32.js'

it('crc32Combine(crc(A), crc(B), shift(|B|)) is crc(A then B), for any cut', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 5000 }), fc.nat({ max: 5000 }), (bytes, cut) => {
      const at = Math.min(cut, bytes.length)
      const a = bytes.subarray(0, at)
      const b = bytes.subarray(at)
      assert.equal(crc32Combine(crc32(a), crc32(b), crc32Shift(b.length)), crc32(bytes))
    }),
  )
})

it('crc32OfBlocks: the CRC of a run of blocks from the blocks’ CRCs; one changed byte changes it', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(16, 512, 4096),
      fc.integer({ min: 1, max: 12 }),
      fc.nat({ max: 3 }),
      fc.nat(),
      (bs, n, from, flip) => {
        const bytes = new Uint8Array((from + n) * bs)
        for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 131 + (i >> 8)) & 0xff
        const crcs = Array.from({ length: from + n }, (_, i) => crc32(bytes.subarray(i * bs, (i + 1) * bs)))
        const run = bytes.subarray(from * bs)
        assert.equal(crc32OfBlocks(crcs, from, n, bs), crc32(run))
        const bad = Uint8Array.from(run)
        const at = flip % bad.length
        bad[at] = (bad[at] as number) ^ (1 << (flip % 8))
        assert.notEqual(crc32OfBlocks(crcs, from, n, bs), crc32(bad))
      },
    ),
  )
})

it('crc32Shift refuses what is not a byte count', () => {
  assert.throws(() => crc32Shift(-1), RangeError)
  assert.throws(() => crc32Shift(1.5), RangeError)
  assert.equal(crc32Combine(crc32(new Uint8Array([1, 2])), 0, crc32Shift(0)), crc32(new Uint8Array([1, 2])))
})
