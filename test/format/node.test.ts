import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  type BlockMapNode,
  DIRTY_LO,
  decodeNode,
  encodeNode,
  MAX_CNO,
  NODE_MAGIC,
  type NodeExpectation,
  nodeCapacity,
  pointerLo,
} from '../../lib/format/index.js'
import { resealNode, throwsCode, view } from '../helpers/format.js'

function leaf(): BlockMapNode {
  return {
    level: 0,
    count: 3,
    cno: 7,
    keys: Uint32Array.of(5, 6, 0xffffffff),
    ptrHi: Uint32Array.of(7, 0, 3),
    ptrLo: Uint32Array.of(pointerLo(1, 2), 0, pointerLo(0x3fff, 0x3ffff)),
  }
}
function indexNode(): BlockMapNode {
  return {
    level: 1,
    count: 2,
    cno: 9,
    keys: Uint32Array.of(0, 5),
    ptrHi: Uint32Array.of(7, 9),
    ptrLo: Uint32Array.of(1, 0x40004),
  }
}
function encoded(n: BlockMapNode, size = 4096): Uint8Array {
  const b = new Uint8Array(size)
  encodeNode(b, n)
  return b
}
const any = { maxCno: MAX_CNO, where: 'k meta block 0' }

test('capacity is floor((metaBlockSize - 16) / 12)', () => {
  assert.equal(nodeCapacity(4096), 340)
  assert.equal(nodeCapacity(65536), 5460)
})

test('leaf layout and round trip (ZERO pointer in a leaf)', () => {
  const b = encoded(leaf())
  const v = view(b)
  assert.deepEqual([...b.subarray(0, 4)], [0x53, 0x53, 0x4e, 0x44])
  assert.equal(v.getUint32(0, true), NODE_MAGIC)
  assert.deepEqual([b[4], b[5], v.getUint16(6, true), v.getUint32(8, true)], [0, 0, 3, 7])
  assert.deepEqual(
    [16, 20, 24].map((o) => v.getUint32(o, true)),
    [5, 0x40002, 7],
  )
  assert.ok(b.subarray(16 + 36).every((x) => x === 0))
  assert.deepEqual(decodeNode(b, { ...any, level: 0, cno: 7, maxCno: 7 }), leaf())
})

test('index node round trip', () => {
  assert.deepEqual(
    decodeNode(encoded(indexNode()), { ...any, level: 1, minKey: 0, maxKeyExclusive: 6, maxCno: 9 }),
    indexNode(),
  )
})

test('full nodes: 340 entries in 4 KiB, 5460 in 64 KiB', () => {
  for (const size of [4096, 65536]) {
    const count = nodeCapacity(size)
    const n: BlockMapNode = {
      level: 7,
      count,
      cno: MAX_CNO,
      keys: Uint32Array.from({ length: count }, (_, i) => 0xffffffff - count + 1 + i),
      ptrHi: Uint32Array.from({ length: count }, (_, i) => MAX_CNO - i),
      ptrLo: Uint32Array.from({ length: count }, (_, i) => (0xffffffff - i) >>> 0),
    }
    const b = encoded(n, size)
    assert.equal(view(b).getUint32(16 + (count - 1) * 12, true), 0xffffffff)
    assert.deepEqual(decodeNode(b, any), n)
    throwsCode(
      () => encodeNode(new Uint8Array(size), { ...n, count: count + 1 }),
      'ERR_INVALID_ARGUMENT',
      `count ${count + 1}`,
    )
  }
})

test('node round trip (fast-check)', () => {
  const arb = fc
    .record({
      level: fc.integer({ min: 0, max: 7 }),
      cno: fc.integer({ min: 1, max: MAX_CNO }),
      keys: fc.uniqueArray(fc.integer({ min: 0, max: 0xffffffff }), { minLength: 1, maxLength: 340 }),
      seed: fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 0xffffffff }), fc.boolean()), {
        minLength: 340,
        maxLength: 340,
      }),
    })
    .map(({ level, cno, keys, seed }): BlockMapNode => {
      keys.sort((a, b) => a - b)
      const zero = (i: number) => level === 0 && seed[i]![2]
      return {
        level,
        cno,
        count: keys.length,
        keys: Uint32Array.from(keys),
        ptrHi: Uint32Array.from(keys, (_, i) => (zero(i) ? 0 : 1 + (seed[i]![0] % cno))),
        ptrLo: Uint32Array.from(keys, (_, i) => (zero(i) ? 0 : seed[i]![1])),
      }
    })
  fc.assert(
    fc.property(arb, (n) => {
      assert.deepEqual(decodeNode(encoded(n), { ...any, level: n.level, cno: n.cno }), n)
    }),
    { numRuns: 500 },
  )
})

test('decodeNode: length, magic, CRC, then each bound, with the numbers', () => {
  throwsCode(() => decodeNode(new Uint8Array(4095), any), 'ERR_CORRUPT', 'k meta block 0: node is 4095 bytes')
  throwsCode(() => decodeNode(new Uint8Array(6000), any), 'ERR_CORRUPT', 'is 6000 bytes')
  let b = encoded(leaf())
  b[0] = 0
  throwsCode(() => decodeNode(b, any), 'ERR_CORRUPT', 'magic 0x444e5300 is not 0x444e5353')
  b = encoded(leaf())
  b[4000] = 1
  throwsCode(() => decodeNode(b, any), 'ERR_CORRUPT', /node CRC 0x[0-9a-f]{8} stored, 0x[0-9a-f]{8} computed/)
  b = encoded(leaf())
  b[12] = b[12]! ^ 1
  throwsCode(() => decodeNode(b, any), 'ERR_CORRUPT', 'node CRC')

  const cases: [BlockMapNode, (v: DataView, b: Uint8Array) => void, Partial<NodeExpectation>, string][] = [
    [leaf(), (v) => v.setUint8(4, 8), {}, 'level 8 is above 7'],
    [leaf(), () => {}, { level: 1 }, 'level 0, expected 1'],
    [leaf(), (v) => v.setUint8(5, 1), {}, 'flags 0x1'],
    [leaf(), (v) => v.setUint16(6, 0, true), {}, 'count 0 is not in 1..340'],
    [leaf(), (v) => v.setUint16(6, 341, true), {}, 'count 341 is not in 1..340'],
    [leaf(), (v) => v.setUint32(8, 0, true), {}, 'cno 0 is not in 1..'],
    [leaf(), () => {}, { maxCno: 6 }, 'cno 7 is not in 1..6'],
    [leaf(), () => {}, { cno: 8 }, 'cno 7, expected 8'],
    [leaf(), (v) => v.setUint32(28, 5, true), {}, 'key 1 (5) is not above key 0 (5)'],
    [leaf(), () => {}, { minKey: 6 }, 'key 0 (5) is outside [6, 4294967296)'],
    [indexNode(), () => {}, { maxKeyExclusive: 5 }, 'key 1 (5) is outside [0, 5)'],
    [
      leaf(),
      (v) => {
        v.setUint32(20, DIRTY_LO, true)
        v.setUint32(24, 0, true)
      },
      {},
      'entry 0 (key 5): DIRTY',
    ],
    [
      indexNode(),
      (v) => {
        v.setUint32(20, 0, true)
        v.setUint32(24, 0, true)
      },
      {},
      'entry 0 (key 0): ZERO pointer',
    ],
    [leaf(), (v) => v.setUint32(8, 6, true), {}, 'entry 0 (key 5): pointer to 7.1 unit 2 is newer than cno 6'],
    [leaf(), (_, b) => (b[16 + 36] = 1), {}, 'byte 52, past 3 entries, is not zero'],
    [leaf(), (_, b) => (b[4095] = 1), {}, 'byte 4095'],
  ]
  for (const [n, mutate, expected, msg] of cases) {
    b = encoded(n)
    mutate(view(b), b)
    throwsCode(() => decodeNode(resealNode(b), { ...any, ...expected }), 'ERR_CORRUPT', 'k meta block 0: node ', msg)
  }
})

test('encodeNode refuses what decodeNode would refuse', () => {
  const bad: [Partial<BlockMapNode>, string][] = [
    [{ level: 8 }, 'level 8'],
    [{ count: 0 }, 'count 0'],
    [{ cno: 0 }, 'cno 0'],
    [{ cno: 6 }, 'newer than cno 6'],
    [{ keys: Uint32Array.of(5, 5, 6) }, 'key 1 (5) is not above'],
    [{ keys: Uint32Array.of(5) }, 'arrays shorter than count 3'],
    [{ ptrLo: Uint32Array.of(DIRTY_LO, 0, 0), ptrHi: Uint32Array.of(0, 0, 0) }, 'DIRTY'],
  ]
  for (const [patch, msg] of bad) throwsCode(() => encoded({ ...leaf(), ...patch }), 'ERR_INVALID_ARGUMENT', msg)
  throwsCode(
    () => encoded({ ...indexNode(), ptrHi: Uint32Array.of(0, 9), ptrLo: Uint32Array.of(0, 1) }),
    'ERR_INVALID_ARGUMENT',
    'ZERO',
  )
  throwsCode(
    () => encodeNode(new Uint8Array(5000), leaf()),
    'ERR_INVALID_ARGUMENT',
    '5000 bytes is not a meta block size',
  )
  // Encoding overwrites whatever the block held.
  const b = new Uint8Array(4096).fill(0xaa)
  encodeNode(b, leaf())
  assert.deepEqual(b, encoded(leaf()))
})
