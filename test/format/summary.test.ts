import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { decodeSummary, emptySummary, encodeSummary, type Summary } from '../../lib/format/index.js'
import { crc32 } from '../../lib/util/crc32.js'
import { throwsCode, view } from '../helpers/format.js'

function sample(): Summary {
  return {
    count: 3,
    blockIndex: Uint32Array.of(5, 0xffffffff, 5),
    live: Uint8Array.of(0, 1, 1),
    crc: Uint32Array.of(0x12345678, 0, 0xffffffff),
  }
}

test('summary: 16-byte entries { blockIndex, flags (bit0 LIVE), crc, reserved }; returns the region CRC', () => {
  const b = new Uint8Array(3 * 16)
  const crc = encodeSummary(b, sample())
  assert.equal(crc, crc32(b))
  const v = view(b)
  assert.deepEqual(
    [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44].map((o) => v.getUint32(o, true)),
    [5, 0, 0x12345678, 0, 0xffffffff, 1, 0, 0, 5, 1, 0xffffffff, 0],
  )
  assert.deepEqual(decodeSummary(b, { count: 3, summaryCrc: crc, where: 'k' }), sample())
})

test('summary of no slots is empty, CRC 0', () => {
  const b = new Uint8Array(0)
  assert.equal(encodeSummary(b, emptySummary(0)), 0)
  assert.deepEqual(decodeSummary(b, { count: 0, summaryCrc: 0, where: 'k' }), emptySummary(0))
})

test('summary round trip at an offset (fast-check)', () => {
  const entry = fc.tuple(fc.integer({ min: 0, max: 0xffffffff }), fc.boolean(), fc.integer({ min: 0, max: 0xffffffff }))
  fc.assert(
    fc.property(fc.array(entry, { maxLength: 200 }), fc.nat(64), (entries, offset) => {
      const s: Summary = {
        count: entries.length,
        blockIndex: Uint32Array.from(entries.map((e) => e[0])),
        live: Uint8Array.from(entries.map((e) => (e[1] ? 1 : 0))),
        crc: Uint32Array.from(entries.map((e) => e[2])),
      }
      const b = new Uint8Array(offset + s.count * 16)
      const crc = encodeSummary(b, s, offset)
      assert.deepEqual(decodeSummary(b.subarray(offset), { count: s.count, summaryCrc: crc, where: 'k' }), s)
    }),
  )
})

test('decodeSummary: length, CRC, flags, reserved, with the numbers', () => {
  const b = new Uint8Array(48)
  const crc = encodeSummary(b, sample())
  const where = '0000000007.1'
  throwsCode(
    () => decodeSummary(b.subarray(0, 47), { count: 3, summaryCrc: crc, where }),
    'ERR_CORRUPT',
    '0000000007.1: summary is 47 bytes, 3 entries need 48',
  )
  throwsCode(
    () => decodeSummary(b, { count: 3, summaryCrc: crc ^ 1, where }),
    'ERR_CORRUPT',
    'summary CRC',
    'header says',
  )
  const flags = b.slice()
  view(flags).setUint32(16 + 4, 3, true)
  throwsCode(
    () => decodeSummary(flags, { count: 3, summaryCrc: crc32(flags), where }),
    'ERR_CORRUPT',
    'summary entry 1 has unknown flags 0x00000003',
  )
  const reserved = b.slice()
  view(reserved).setUint32(32 + 12, 9, true)
  throwsCode(
    () => decodeSummary(reserved, { count: 3, summaryCrc: crc32(reserved), where }),
    'ERR_CORRUPT',
    'summary entry 2 reserved is 0x00000009',
  )
})

test('encodeSummary checks its arguments', () => {
  throwsCode(() => encodeSummary(new Uint8Array(47), sample()), 'ERR_INVALID_ARGUMENT', 'no room for 3 entries')
  throwsCode(() => encodeSummary(new Uint8Array(48), { ...sample(), count: 4 }), 'ERR_INVALID_ARGUMENT', 'count 4')
  throwsCode(
    () => encodeSummary(new Uint8Array(48), { ...sample(), live: Uint8Array.of(0, 2, 1) }),
    'ERR_INVALID_ARGUMENT',
    'slot 1 live is 2',
  )
})
