/**
 * Decoder fuzzing: random bytes, and bit flips, truncations and splices of the golden
 * objects. The only outcomes allowed are a correct decode or a StreamSegmentError (never a
 * TypeError or RangeError), and a changed byte is never accepted: every byte of an object
 * is under some CRC. Mutations resealed with a fresh CRC reach the bounds checks; whatever
 * passes them must re-encode to the very same bytes. `FUZZ_RUNS=100000` for a long run.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { StreamSegmentError } from '../../lib/errors.js'
import {
  decodeHeader,
  decodeInodeObject,
  decodeNode,
  decodeObject,
  encodeHeader,
  encodeInodeObject,
  encodeNode,
  FORMAT_PARTED,
  headerMagicFormat,
  MAX_CNO,
  objectLayout,
} from '../../lib/format/index.js'
import { FUZZ_RUNS, readFixture, resealHeader, resealInodeObject, resealNode, view } from '../helpers/format.js'

const OBJECTS = [
  { key: '0000000007.1', bytes: readFixture('0000000007.1.bin') },
  { key: '0000000007.0', bytes: readFixture('0000000007.0.bin') },
  // Head first (PartedSegment): decodeObject detects the format as a reader that does not know it.
  { key: '0000000007.1', bytes: readFixture('parted.0000000007.1.bin') },
  { key: '0000000007.0', bytes: readFixture('parted.0000000007.0.bin') },
]
const INODE = readFixture('inode.bin')
const NODES = [
  OBJECTS[0]!.bytes.subarray(16384, 20480),
  OBJECTS[1]!.bytes.subarray(4096, 8192),
  OBJECTS[1]!.bytes.subarray(8192, 12288),
]
const ALL = [...OBJECTS.map((o) => o.bytes), INODE]
const runs = { numRuns: FUZZ_RUNS }
const anyNode = { maxCno: MAX_CNO, where: 'fuzz' }

/** The decode's value, or the StreamSegmentError it threw; any other throw fails the test. */
function attempt<T>(fn: () => T): { value: T } | { err: StreamSegmentError } {
  try {
    return { value: fn() }
  } catch (err) {
    if (err instanceof StreamSegmentError) return { err }
    throw err
  }
}
function rejects(fn: () => unknown): void {
  const r = attempt(fn)
  assert.ok('err' in r, 'a mutated input was accepted')
}
function flip(bytes: Uint8Array, bit: number): Uint8Array {
  const out = bytes.slice()
  out[bit >> 3] = out[bit >> 3]! ^ (1 << (bit & 7))
  return out
}
function headerOf(bytes: Uint8Array): { tail: Uint8Array; size: number; cno: number; part: number }[] {
  return OBJECTS.filter((o) => o.bytes === bytes).map((o) => ({
    tail: headerMagicFormat(o.bytes) === FORMAT_PARTED ? o.bytes.subarray(0, 256) : o.bytes.subarray(-256),
    size: o.bytes.length,
    cno: 7,
    part: Number(o.key.slice(11)),
  }))
}

test('random bytes give a StreamSegmentError, never another error', () => {
  const key = fc.constantFrom('0000000007.1', '0000000007.0', '0000000001.0')
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 20000 }), key, (bytes, k) => rejects(() => decodeObject(bytes, k))),
    runs,
  )
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 250, maxLength: 260 }), fc.nat(30000), (bytes, size) =>
      rejects(() => decodeHeader(bytes, size, { cno: 7, part: 1 })),
    ),
    runs,
  )
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 120, maxLength: 130 }), (b) => rejects(() => decodeInodeObject(b))),
    runs,
  )
  fc.assert(
    fc.property(fc.constantFrom(4095, 4096, 8192), fc.uint8Array({ maxLength: 64 }), (size, prefix) => {
      const b = new Uint8Array(size)
      b.set(prefix)
      view(b).setUint32(0, 0x444e5353, true) // past the magic, to the CRC
      rejects(() => decodeNode(b, anyNode))
    }),
    runs,
  )
})

test('every single-bit flip of a header, inode object or node is rejected (exhaustive)', () => {
  for (const { tail, size, cno, part } of OBJECTS.flatMap((o) => headerOf(o.bytes))) {
    for (let bit = 0; bit < 256 * 8; bit++) rejects(() => decodeHeader(flip(tail, bit), size, { cno, part }))
  }
  for (let bit = 0; bit < 128 * 8; bit++) rejects(() => decodeInodeObject(flip(INODE, bit)))
  // A node's header and entries exhaustively; the zero tail is sampled below.
  for (const node of NODES) {
    for (let bit = 0; bit < 128 * 8; bit++) rejects(() => decodeNode(flip(node, bit), anyNode))
  }
  fc.assert(
    fc.property(fc.constantFrom(...NODES), fc.nat(4096 * 8 - 1), (node, bit) =>
      rejects(() => decodeNode(flip(node, bit), anyNode)),
    ),
    runs,
  )
})

test('single-bit flips anywhere in an object are rejected', () => {
  fc.assert(
    fc.property(fc.constantFrom(...OBJECTS), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (o, at) => {
      const bit = Math.floor(at * o.bytes.length * 8)
      rejects(() => decodeObject(flip(o.bytes, bit), o.key))
    }),
    runs,
  )
})

test('truncations of either end are rejected', () => {
  fc.assert(
    fc.property(fc.constantFrom(...OBJECTS), fc.nat(), fc.boolean(), (o, n, front) => {
      const k = 1 + (n % o.bytes.length)
      rejects(() => decodeObject(front ? o.bytes.subarray(k) : o.bytes.subarray(0, o.bytes.length - k), o.key))
    }),
    runs,
  )
  for (let k = 1; k < 128; k++) rejects(() => decodeInodeObject(INODE.subarray(k)))
})

test('splices from another fixture: accepted only when no byte changed, and then equal', () => {
  const expected = OBJECTS.map((o) => decodeObject(o.bytes, o.key))
  fc.assert(
    fc.property(
      fc.nat(OBJECTS.length - 1),
      fc.constantFrom(...ALL),
      fc.nat(),
      fc.nat(),
      fc.integer({ min: 1, max: 300 }),
      fc.boolean(),
      (i, src, from, to, len, insert) => {
        const o = OBJECTS[i]!
        const s = from % src.length
        const piece = src.subarray(s, s + len)
        const at = to % o.bytes.length
        let mutated: Uint8Array
        if (insert) {
          mutated = new Uint8Array(o.bytes.length + piece.length)
          mutated.set(o.bytes.subarray(0, at))
          mutated.set(piece, at)
          mutated.set(o.bytes.subarray(at), at + piece.length)
        } else {
          mutated = o.bytes.slice()
          mutated.set(piece.subarray(0, mutated.length - at), at)
        }
        const r = attempt(() => decodeObject(mutated, o.key))
        const same = mutated.length === o.bytes.length && mutated.every((x, j) => x === o.bytes[j])
        if (same) assert.deepEqual('value' in r && r.value, expected[i])
        else assert.ok('err' in r, 'a spliced object was accepted')
      },
    ),
    runs,
  )
})

/** Up to 4 random bytes overwritten at random places (biased to the first `hot` bytes). */
const edits = (hot: number, size: number) =>
  fc.array(fc.tuple(fc.oneof(fc.nat(hot - 1), fc.nat(size - 1)), fc.oneof(fc.constantFrom(0, 1, 0xff), fc.nat(255))), {
    minLength: 1,
    maxLength: 4,
  })
function edited(bytes: Uint8Array, e: [number, number][]): Uint8Array {
  const out = bytes.slice()
  for (const [at, x] of e) out[at] = x
  return out
}

test('resealed mutations reach the bounds checks: rejected, or canonical', () => {
  // Headers: after the CRC, the counts and names must hold to reach the bounds, so the
  // object size passed is the one the mutated counts give.
  fc.assert(
    fc.property(fc.constantFrom(...OBJECTS.flatMap((o) => headerOf(o.bytes))), edits(56, 252), (h, e) => {
      const tail = resealHeader(edited(h.tail, e))
      const v = view(tail)
      const size = objectLayout(
        { dataCount: v.getUint32(24, true), metaCount: v.getUint32(28, true) },
        { dataShift: v.getUint8(12), metaShift: v.getUint8(13), format: headerMagicFormat(tail) },
      ).objectSize
      const r = attempt(() => decodeHeader(tail, size, { cno: h.cno, part: h.part }))
      if ('value' in r) assert.deepEqual(encodeHeader(r.value), tail)
    }),
    runs,
  )
  fc.assert(
    fc.property(edits(128, 124), (e) => {
      const b = resealInodeObject(edited(INODE, e))
      const r = attempt(() => decodeInodeObject(b))
      if ('value' in r) assert.deepEqual(encodeInodeObject(r.value), b)
    }),
    runs,
  )
  fc.assert(
    fc.property(fc.constantFrom(...NODES), edits(80, 4096), (node, e) => {
      const b = resealNode(edited(node, e))
      const r = attempt(() => decodeNode(b, anyNode))
      if ('value' in r) {
        const again = new Uint8Array(4096)
        encodeNode(again, r.value)
        assert.deepEqual(again, b)
      }
    }),
    runs,
  )
})
