/**
 * The golden objects of layout version 1 (test/fixtures/*.bin, written once by
 * make-fixtures.ts). Every expected value here is written out literally, not recomputed
 * by the encoder under test: if a layout drifts, this fails. Such a change needs a new
 * LAYOUT_VERSION and new fixtures next to these, never regenerated ones.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { test } from 'node:test'
import {
  type BlockMapNode,
  dataSlot,
  decodeHeader,
  decodeInodeObject,
  decodeNode,
  decodeObject,
  encodeInodeObject,
  encodeObject,
  type Header,
  type Inode,
  LAYOUT_VERSION,
  type Summary,
} from '../../lib/format/index.js'
import { buildFixtures } from '../fixtures/make-fixtures.js'
import { hex, readFixture } from '../helpers/format.js'

const P1 = readFixture('0000000007.1.bin')
const P0 = readFixture('0000000007.0.bin')
const INODE = readFixture('inode.bin')

/** Block bytes as the fixtures were made: byte i of block b, generation g, checkpoint c. */
function pattern(c: number, b: number, g: number, length = 4096): Uint8Array {
  return Uint8Array.from({ length: 4096 }, (_, i) => (i < length ? (i + b * 17 + c * 5 + g * 3) & 0xff : 0))
}

function inode(x: Omit<Inode, 'rootKeys' | 'rootPtrHi' | 'rootPtrLo'>, root: number[][] = []): Inode {
  const at = (j: number) => Uint32Array.from([0, 1, 2, 3], (i) => root[i]?.[j] ?? 0)
  return { ...x, rootKeys: at(0), rootPtrHi: at(1), rootPtrLo: at(2) }
}

// biome-ignore format: a table
const BASE = inode({ size: 20480, cno: 6, format: 1, dataShift: 12, metaShift: 12, rootLevel: 1, rootCount: 1, ctimeMs: 1700000000000, mtimeMs: 1700000600000 }, [[0, 6, 0x40005]])
// biome-ignore format: a table
const TOP = inode({ size: 29672, cno: 7, format: 1, dataShift: 12, metaShift: 12, rootLevel: 2, rootCount: 1, ctimeMs: 1700000000000, mtimeMs: 1700001200000 }, [[0, 7, 0x00002]])
// biome-ignore format: a table
const P1_INODE = inode({ size: 29672, cno: 7, format: 1, dataShift: 12, metaShift: 12, rootLevel: 0, rootCount: 0, ctimeMs: 1700000000000, mtimeMs: 1700001100000 })

const P1_HEADER: Header = {
  format: 1,
  flags: 4, // SENT_AHEAD
  dataShift: 12,
  metaShift: 12,
  cno: 7,
  part: 1,
  dataCount: 4,
  metaCount: 1,
  summaryCrc: 0xa63aa236,
  createdMs: 1700001100000,
  baseInode: BASE,
  inode: P1_INODE,
}
const P0_HEADER: Header = {
  format: 1,
  flags: 1, // CHECKPOINT
  dataShift: 12,
  metaShift: 12,
  cno: 7,
  part: 0,
  dataCount: 1,
  metaCount: 2,
  summaryCrc: 0x9302a68a,
  createdMs: 1700001200000,
  baseInode: BASE,
  inode: TOP,
}
const P1_SUMMARY: Summary = {
  count: 4,
  blockIndex: Uint32Array.of(5, 6, 5, 7),
  live: Uint8Array.of(0, 1, 1, 1),
  crc: Uint32Array.of(0x56512d40, 0xa1bb6b77, 0x9b43d005, 0xca2db77e),
}
const P0_SUMMARY: Summary = {
  count: 1,
  blockIndex: Uint32Array.of(2),
  live: Uint8Array.of(1),
  crc: Uint32Array.of(0x03af124e),
}
function node(level: number, entries: number[][]): BlockMapNode {
  const col = (j: number) => Uint32Array.from(entries, (e) => e[j]!)
  return { level, count: entries.length, cno: 7, keys: col(0), ptrHi: col(1), ptrLo: col(2) }
}
const LEAF_B = node(0, [
  [5, 7, 0x40002],
  [6, 7, 0x40001],
  [7, 7, 0x40003],
])
const LEAF_A = node(0, [
  [0, 6, 0x40000],
  [1, 6, 0x40001],
  [2, 7, 0x00000],
  [3, 0, 0], // ZERO: block 3 zeroed by checkpoint 7
  [4, 6, 0x40004],
])
const INDEX = node(1, [
  [0, 7, 0x00001],
  [5, 7, 0x40004],
])

const HEADER_P1 = hex(
  '53 53 45 47 54 41 49 4c 01 00 04 00 0c 0c 00 00', // magic, version 1, flags SENT_AHEAD, shifts 12/12
  '07 00 00 00 01 00 00 00 04 00 00 00 01 00 00 00', // cno 7, part 1, 4 data, 1 meta
  '04 00 00 00 36 a2 3a a6 e0 30 f6 cf 8b 01 00 00', // 4 summary entries, summaryCrc, createdMs
  '00 00 00 00 00 00 00 00 00 50 00 00 00 00 00 00', // reserved; base inode: size 20480
  '06 00 00 00 01 0c 0c 01 01 00 00 00 00 00 00 00', // cno 6, format 1, 12, 12, level 1, count 1
  '00 68 e5 cf 8b 01 00 00 c0 8f ee cf 8b 01 00 00', // ctime, mtime
  '00 00 00 00 05 00 04 00 06 00 00 00 00 00 00 00', // root[0] = { 0, lo 0x40005, hi 6 }
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 e8 73 00 00 00 00 00 00', // inode: size 29672
  '07 00 00 00 01 0c 0c 00 00 00 00 00 00 00 00 00', // cno 7, format 1, 12, 12, level 0, count 0
  '00 68 e5 cf 8b 01 00 00 e0 30 f6 cf 8b 01 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 0d 6c fa 5f', // reserved, crc
)
const HEADER_P0 = hex(
  '53 53 45 47 54 41 49 4c 01 00 01 00 0c 0c 00 00', // flags CHECKPOINT
  '07 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00', // cno 7, part 0, 1 data, 2 meta
  '01 00 00 00 8a a6 02 93 80 b7 f7 cf 8b 01 00 00',
  '00 00 00 00 00 00 00 00 00 50 00 00 00 00 00 00',
  '06 00 00 00 01 0c 0c 01 01 00 00 00 00 00 00 00',
  '00 68 e5 cf 8b 01 00 00 c0 8f ee cf 8b 01 00 00',
  '00 00 00 00 05 00 04 00 06 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 e8 73 00 00 00 00 00 00',
  '07 00 00 00 01 0c 0c 02 01 00 00 00 00 00 00 00', // inode: level 2, count 1
  '00 68 e5 cf 8b 01 00 00 80 b7 f7 cf 8b 01 00 00',
  '00 00 00 00 02 00 00 00 07 00 00 00 00 00 00 00', // root[0] = { 0, lo 2, hi 7 }
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 22 e7 1c 48',
)
const INODE_OBJECT = hex(
  '53 53 45 47 49 4e 4f 44 01 00 00 00 00 00 00 00', // magic, version 1, flags, reserved
  'e8 73 00 00 00 00 00 00 07 00 00 00 01 0c 0c 02',
  '01 00 00 00 00 00 00 00 00 68 e5 cf 8b 01 00 00',
  '80 b7 f7 cf 8b 01 00 00 00 00 00 00 02 00 00 00',
  '07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00',
  '00 00 00 00 00 00 00 00 00 00 00 00 05 af 45 a5', // reserved, crc
)
const SUMMARY_P1 = hex(
  '05 00 00 00 00 00 00 00 40 2d 51 56 00 00 00 00', // block 5, dead
  '06 00 00 00 01 00 00 00 77 6b bb a1 00 00 00 00',
  '05 00 00 00 01 00 00 00 05 d0 43 9b 00 00 00 00',
  '07 00 00 00 01 00 00 00 7e b7 2d ca 00 00 00 00',
)
const SUMMARY_P0 = hex('02 00 00 00 01 00 00 00 4e 12 af 03 00 00 00 00')
const NODE_LEAF_B = hex(
  '53 53 4e 44 00 00 03 00 07 00 00 00 49 fb b0 01', // "SSND", level 0, flags, count 3, cno 7, crc
  '05 00 00 00 02 00 04 00 07 00 00 00 06 00 00 00',
  '01 00 04 00 07 00 00 00 07 00 00 00 03 00 04 00',
  '07 00 00 00',
)
const NODE_LEAF_A = hex(
  '53 53 4e 44 00 00 05 00 07 00 00 00 4a 9d da a1',
  '00 00 00 00 00 00 04 00 06 00 00 00 01 00 00 00',
  '01 00 04 00 06 00 00 00 02 00 00 00 00 00 00 00',
  '07 00 00 00 03 00 00 00 00 00 00 00 00 00 00 00',
  '04 00 00 00 04 00 04 00 06 00 00 00',
)
const NODE_INDEX = hex(
  '53 53 4e 44 01 00 02 00 07 00 00 00 55 5f 6a 69', // level 1, count 2
  '00 00 00 00 01 00 00 00 07 00 00 00 05 00 00 00',
  '04 00 04 00 07 00 00 00',
)

/** A meta block: `prefix`, then zeros to 4096. */
function block(prefix: Uint8Array): Uint8Array {
  const b = new Uint8Array(4096)
  b.set(prefix)
  return b
}

test('golden fixtures are pinned by size and SHA-256', () => {
  const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')
  assert.equal(LAYOUT_VERSION, 1)
  assert.equal(P1.length, 20800)
  assert.equal(P0.length, 12560)
  assert.equal(INODE.length, 128)
  assert.equal(sha(P1), '42bc2ed49b486d2ec025c26de0c0baa48bfe3fd79796b5cef1a1b8e568ecd407')
  assert.equal(sha(P0), '67c23d5445a57183ca768acc965acd36adba8fbd754230ce6d5fa068bbaa3beb')
  assert.equal(sha(INODE), 'b72a1dee7f61451302e0ec4909f16be02456812e4712aeb57d8894b38cdeb826')
})

test('0000000007.1 byte for byte: data slots, leaf, summary, header', () => {
  const slots = [pattern(7, 5, 0), pattern(7, 6, 0), pattern(7, 5, 1), pattern(7, 7, 0, 1000)]
  for (const [i, s] of slots.entries()) assert.deepEqual(P1.subarray(i * 4096, (i + 1) * 4096), s, `slot ${i}`)
  assert.deepEqual(P1.subarray(16384, 20480), block(NODE_LEAF_B))
  assert.deepEqual(P1.subarray(20480, 20544), SUMMARY_P1)
  assert.deepEqual(P1.subarray(20544), HEADER_P1)
})

test('0000000007.0 byte for byte: data slot, leaf, index node, summary, header', () => {
  assert.deepEqual(P0.subarray(0, 4096), pattern(7, 2, 0))
  assert.deepEqual(P0.subarray(4096, 8192), block(NODE_LEAF_A))
  assert.deepEqual(P0.subarray(8192, 12288), block(NODE_INDEX))
  assert.deepEqual(P0.subarray(12288, 12304), SUMMARY_P0)
  assert.deepEqual(P0.subarray(12304), HEADER_P0)
})

test('inode object byte for byte', () => {
  assert.deepEqual(INODE, INODE_OBJECT)
})

test('the golden objects decode to the literal fields', () => {
  const o1 = decodeObject(P1, '0000000007.1')
  assert.deepEqual(o1.header, P1_HEADER)
  assert.deepEqual(o1.summary, P1_SUMMARY)
  assert.deepEqual(o1.nodes, [LEAF_B])
  assert.deepEqual(dataSlot(o1, 2), pattern(7, 5, 1))
  const o0 = decodeObject(P0, '0000000007.0')
  assert.deepEqual(o0.header, P0_HEADER)
  assert.deepEqual(o0.summary, P0_SUMMARY)
  assert.deepEqual(o0.nodes, [LEAF_A, INDEX])
  assert.deepEqual(dataSlot(o0, 0), pattern(7, 2, 0))
  assert.deepEqual(decodeInodeObject(INODE), TOP)
  // The pieces a reader fetches separately decode alone.
  assert.deepEqual(decodeHeader(P0.subarray(-256), P0.length, { cno: 7, part: 0 }), P0_HEADER)
  const expectLeafB = { level: 0, minKey: 5, maxKeyExclusive: 2 ** 32, cno: 7, maxCno: 7, where: 'k' }
  assert.deepEqual(decodeNode(P1.subarray(16384, 20480), expectLeafB), LEAF_B)
  assert.deepEqual(decodeNode(P0.subarray(4096, 8192), { level: 0, maxKeyExclusive: 5, maxCno: 7, where: 'k' }), LEAF_A)
})

test('the literal fields encode to the golden bytes', () => {
  const data1 = new Uint8Array(4 * 4096)
  const slots1 = [pattern(7, 5, 0), pattern(7, 6, 0), pattern(7, 5, 1), pattern(7, 7, 0, 1000)]
  for (const [i, s] of slots1.entries()) data1.set(s, i * 4096)
  const { dataCount: _d1, metaCount: _m1, summaryCrc: _s1, ...f1 } = P1_HEADER
  assert.deepEqual(encodeObject(f1, data1, [LEAF_B], P1_SUMMARY), P1)
  const { dataCount: _d0, metaCount: _m0, summaryCrc: _s0, ...f0 } = P0_HEADER
  assert.deepEqual(encodeObject(f0, pattern(7, 2, 0), [LEAF_A, INDEX], P0_SUMMARY), P0)
  assert.deepEqual(encodeInodeObject(TOP), INODE)
})

test('make-fixtures.ts still makes exactly the committed files', () => {
  const files = { '0000000007.1.bin': P1, '0000000007.0.bin': P0, 'inode.bin': INODE } as Record<string, Uint8Array>
  for (const f of buildFixtures()) assert.deepEqual(f.bytes, files[f.name], f.name)
})

// --- the same checkpoint in a PartedSegment container (head first) ---

const PARTED_P1 = readFixture('parted.0000000007.1.bin')
const PARTED_P0 = readFixture('parted.0000000007.0.bin')
const PARTED_INODE = readFixture('parted.inode.bin')

test('PartedSegment golden fixtures are pinned by size and SHA-256', () => {
  const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')
  // 4 KiB of header, summary and padding, then 1 meta block and 4 data blocks; then 2 and 1.
  assert.equal(PARTED_P1.length, 4096 + 4096 + 4 * 4096)
  assert.equal(PARTED_P0.length, 4096 + 2 * 4096 + 4096)
  assert.equal(sha(PARTED_P1), 'd5735deea5c1f4b2aedf21c26cbbc8015b167ebfbdaf39fec46c438db54ac78b')
  assert.equal(sha(PARTED_P0), 'c9e5a388da32e7d741f6865462df133a0a543d436017d3a8ff4f092e162bfaf3')
  assert.equal(sha(PARTED_INODE), 'bcb24656c9174f56a90ed94695120c4b7b5964abd3e5dbe4f205d0d8f89efe50')
})

test('parted 0000000007.1 byte for byte: header, summary, padding, leaf, data slots', () => {
  assert.deepEqual(
    PARTED_P1.subarray(0, 48),
    hex(
      '53 53 45 47 48 45 41 44 01 00 04 00 0c 0c 00 00', // magic "SSEGHEAD", version 1, SENT_AHEAD, shifts
      '07 00 00 00 01 00 00 00 04 00 00 00 01 00 00 00', // cno 7, part 1, 4 data, 1 meta
      '04 00 00 00 36 a2 3a a6 e0 30 f6 cf 8b 01 00 00', // the same summary CRC as tail first
    ),
  )
  assert.deepEqual(PARTED_P1.subarray(256, 320), SUMMARY_P1)
  assert.ok(PARTED_P1.subarray(320, 4096).every((b) => b === 0))
  // Leaf B: blocks 5, 6, 7 at units 4, 3, 5 (after the head and the leaf).
  assert.deepEqual(
    PARTED_P1.subarray(4096, 4096 + 52),
    hex(
      '53 53 4e 44 00 00 03 00 07 00 00 00 6b c7 dc cc',
      '05 00 00 00 04 00 04 00 07 00 00 00 06 00 00 00',
      '03 00 04 00 07 00 00 00 07 00 00 00 05 00 04 00',
      '07 00 00 00',
    ),
  )
  const slots = [pattern(7, 5, 0), pattern(7, 6, 0), pattern(7, 5, 1), pattern(7, 7, 0, 1000)]
  for (const [i, s] of slots.entries()) {
    assert.deepEqual(PARTED_P1.subarray(8192 + i * 4096, 8192 + (i + 1) * 4096), s, `slot ${i}`)
  }
})

test('parted 0000000007.0 byte for byte: header, summary, leaf, index node, data slot', () => {
  assert.deepEqual(
    PARTED_P0.subarray(0, 32),
    hex('53 53 45 47 48 45 41 44 01 00 01 00 0c 0c 00 00', '07 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00'),
  )
  assert.deepEqual(PARTED_P0.subarray(256, 272), SUMMARY_P0)
  assert.ok(PARTED_P0.subarray(272, 4096).every((b) => b === 0))
  assert.deepEqual(PARTED_P0.subarray(4096, 4096 + 16), hex('53 53 4e 44 00 00 05 00 07 00 00 00 c6 8d ee cd'))
  // The index node: leaf A at unit 1 of part 0, leaf B at unit 1 of part 1.
  assert.deepEqual(
    PARTED_P0.subarray(8192, 8192 + 40),
    hex(
      '53 53 4e 44 01 00 02 00 07 00 00 00 86 84 f5 c0',
      '00 00 00 00 01 00 00 00 07 00 00 00 05 00 00 00',
      '01 00 04 00 07 00 00 00',
    ),
  )
  assert.deepEqual(PARTED_P0.subarray(12288), pattern(7, 2, 0))
})

test('the parted golden objects decode, their format detected from the start', () => {
  const o1 = decodeObject(PARTED_P1, '0000000007.1')
  assert.equal(o1.header.format, 2)
  assert.equal(o1.header.inode.format, 2)
  assert.deepEqual(o1.summary, P1_SUMMARY)
  assert.deepEqual(o1.layout.dataOffset, 8192)
  assert.deepEqual(dataSlot(o1, 2), pattern(7, 5, 1))
  const o0 = decodeObject(PARTED_P0, '0000000007.0')
  assert.equal(o0.header.inode.rootPtrLo[0], 2)
  assert.deepEqual(o0.summary, P0_SUMMARY)
  assert.deepEqual(dataSlot(o0, 0), pattern(7, 2, 0))
  assert.equal(decodeInodeObject(PARTED_INODE).format, 2)
  // A reader that knows the format reads the first 256 bytes alone.
  assert.equal(decodeHeader(PARTED_P0.subarray(0, 256), undefined, { cno: 7, part: 0, format: 2 }).dataCount, 1)
  // Asked for the other format, each refuses the header by its magic.
  assert.throws(
    () => decodeHeader(PARTED_P0.subarray(0, 256), undefined, { cno: 7, part: 0, format: 1 }),
    /magic "SSEGHEAD" is not "SSEGTAIL" \(StreamSegment\)/,
  )
  assert.throws(
    () => decodeHeader(P0.subarray(-256), undefined, { cno: 7, part: 0, format: 2 }),
    /magic "SSEGTAIL" is not "SSEGHEAD" \(PartedSegment\)/,
  )
})

test('make-fixtures.ts still makes exactly the committed parted files', () => {
  const files = {
    'parted.0000000007.1.bin': PARTED_P1,
    'parted.0000000007.0.bin': PARTED_P0,
    'parted.inode.bin': PARTED_INODE,
  } as Record<string, Uint8Array>
  for (const f of buildFixtures(2)) assert.deepEqual(f.bytes, files[f.name], f.name)
})
