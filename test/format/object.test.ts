import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  type BlockMapNode,
  dataSlot,
  decodeObject,
  emptyInode,
  encodeObject,
  encodeObjectHead,
  encodeObjectTail,
  FLAG_CHECKPOINT,
  FORMAT_PARTED,
  FORMAT_STREAM,
  type Inode,
  type ObjectFields,
  pointerLo,
  type Summary,
} from '../../lib/format/index.js'
import { crc32 } from '../../lib/util/crc32.js'
import { throwsCode } from '../helpers/format.js'

/** Block `b` of checkpoint 3: bytes derived from the block index, so a wrong slot shows. */
function block(b: number): Uint8Array {
  return Uint8Array.from({ length: 4096 }, (_, i) => (i * 7 + b * 13) & 0xff)
}

function node(level: number, entries: [number, number, number][], cno = 3): BlockMapNode {
  return {
    level,
    count: entries.length,
    cno,
    keys: Uint32Array.from(entries, (e) => e[0]),
    ptrHi: Uint32Array.from(entries, (e) => e[1]),
    ptrLo: Uint32Array.from(entries, (e) => e[2]),
  }
}

function fields(part: number, inode: Partial<Inode> = {}): ObjectFields {
  const base = emptyInode({ dataShift: 12, metaShift: 12, ctimeMs: 1 })
  return {
    format: FORMAT_STREAM,
    flags: part === 0 ? FLAG_CHECKPOINT : 0,
    dataShift: 12,
    metaShift: 12,
    cno: 3,
    part,
    createdMs: 2,
    baseInode: { ...base, cno: 2 },
    inode: { ...base, cno: 3, size: 3 * 4096, ...inode },
  }
}

function slots(blocks: number[], live = blocks.map(() => 1)): { data: Uint8Array; summary: Summary } {
  const data = new Uint8Array(blocks.length * 4096)
  for (const [i, b] of blocks.entries()) data.set(block(b), i * 4096)
  return {
    data,
    summary: {
      count: blocks.length,
      blockIndex: Uint32Array.from(blocks),
      live: Uint8Array.from(live),
      crc: Uint32Array.from(blocks, (b) => crc32(block(b))),
    },
  }
}

/** 0000000003.2: blocks 10, 11, 12 and the leaf over them (meta block 0, unit 3). */
function part2(leafEntries: [number, number, number][] = [10, 11, 12].map((k, i) => [k, 3, pointerLo(2, i)])) {
  const { data, summary } = slots([10, 11, 12])
  return encodeObject(fields(2), data, [node(0, leafEntries)], summary)
}

/** 0000000003.0: block 1 (unit 0), leaf over 0..1 (unit 1), index over the leaf (unit 2), root → index. */
function part0(patch: { index?: [number, number, number][]; root?: [number, number] } = {}) {
  const { data, summary } = slots([1])
  const leaf = node(0, [
    [0, 2, pointerLo(1, 0)],
    [1, 3, pointerLo(0, 0)],
  ])
  const index = node(1, patch.index ?? [[0, 3, pointerLo(0, 1)]])
  const [key, unit] = patch.root ?? [0, 2]
  const inode: Partial<Inode> = {
    size: 2 * 4096,
    rootLevel: 2,
    rootCount: 1,
    rootKeys: Uint32Array.of(key, 0, 0, 0),
    rootPtrHi: Uint32Array.of(3, 0, 0, 0),
    rootPtrLo: Uint32Array.of(pointerLo(0, unit), 0, 0, 0),
  }
  return encodeObject(fields(0, inode), data, [leaf, index], summary)
}

test('encodeObject / decodeObject round trip', () => {
  const bytes = part2()
  assert.equal(bytes.length, 3 * 4096 + 4096 + 48 + 256)
  const obj = decodeObject(bytes, '0000000003.2')
  assert.equal(obj.key, '0000000003.2')
  assert.deepEqual(obj.header, { ...fields(2), dataCount: 3, metaCount: 1, summaryCrc: obj.header.summaryCrc })
  assert.deepEqual(obj.summary, slots([10, 11, 12]).summary)
  assert.deepEqual(obj.nodes, [
    node(
      0,
      [10, 11, 12].map((k, i) => [k, 3, pointerLo(2, i)]),
    ),
  ])
  assert.deepEqual(dataSlot(obj, 1), block(11))
  assert.equal(obj.data.length, 3 * 4096)
  assert.equal(obj.layout.summaryOffset, 4 * 4096)
  const p0 = decodeObject(part0(), '0000000003.0')
  assert.deepEqual(
    p0.nodes.map((n) => n.level),
    [0, 1],
  )
})

test('encodeObjectTail is the object after its meta blocks', () => {
  const bytes = part2()
  const { summary } = slots([10, 11, 12])
  assert.deepEqual(encodeObjectTail({ ...fields(2), metaCount: 1 }, summary), bytes.subarray(4 * 4096))
})

test('an object without data or meta blocks is its header', () => {
  const bytes = encodeObject(fields(0), new Uint8Array(0), [], slots([]).summary)
  assert.equal(bytes.length, 256)
  assert.deepEqual(decodeObject(bytes, '0000000003.0').nodes, [])
})

test('decodeObject: the key must be a segment key, and the one the header names', () => {
  throwsCode(() => decodeObject(part2(), 'inode'), 'ERR_INVALID_ARGUMENT', '"inode" is not a segment key')
  throwsCode(() => decodeObject(part2(), '3.2'), 'ERR_INVALID_ARGUMENT', '"3.2"')
  throwsCode(() => decodeObject(part2(), '0000000003.1'), 'ERR_CORRUPT', '0000000003.1: header names cno 3 part 2')
  throwsCode(
    () => decodeObject(new Uint8Array(10), '0000000003.1'),
    'ERR_CORRUPT',
    'no header: its last 256 bytes are not a StreamSegment header (is 10 bytes',
  )
  throwsCode(() => decodeObject(part2().subarray(1), '0000000003.2'), 'ERR_CORRUPT', 'object has 16687')
})

test('decodeObject verifies every data slot against its summary CRC, dead slots too', () => {
  for (const live of [1, 0]) {
    const { data, summary } = slots([10, 11, 12], [1, live, 1])
    summary.crc[1] = 0x1234
    const bytes = encodeObject(fields(2), data, [], summary)
    const state = live ? 'live' : 'dead'
    throwsCode(
      () => decodeObject(bytes, '0000000003.2'),
      'ERR_CORRUPT',
      `0000000003.2: data slot 1 (block 11, ${state}) CRC 0x${crc32(block(11)).toString(16).padStart(8, '0')} computed, summary says 0x00001234`,
    )
  }
})

test('decodeObject: meta blocks are nodes written by this checkpoint', () => {
  const { data, summary } = slots([10])
  const bytes = encodeObject(fields(2), data, [node(0, [[10, 2, 0]], 2)], summary)
  throwsCode(
    () => decodeObject(bytes, '0000000003.2'),
    'ERR_CORRUPT',
    '0000000003.2 meta block 0: node cno 2, expected 3',
  )
})

test('decodeObject: pointers into this object land on the right block', () => {
  const key2 = '0000000003.2'
  // A leaf entry must name the slot holding its block (a dead slot is fine).
  const swapped = part2([
    [10, 3, pointerLo(2, 1)],
    [11, 3, pointerLo(2, 0)],
  ])
  throwsCode(
    () => decodeObject(swapped, key2),
    'ERR_CORRUPT',
    `${key2} meta block 0: entry 0 (key 10) points at byte 4096 of this object, slot 1, which holds block 11`,
  )
  throwsCode(
    () => decodeObject(part2([[10, 3, pointerLo(2, 3)]]), key2),
    'ERR_CORRUPT',
    'byte 12288 of this object, not a data slot',
  )
  // Pointers to other objects are not checked here.
  decodeObject(
    part2([
      [10, 3, pointerLo(1, 3)],
      [11, 2, pointerLo(2, 7)],
    ]),
    key2,
  )

  const key0 = '0000000003.0'
  throwsCode(
    () => decodeObject(part0({ index: [[0, 3, pointerLo(0, 0)]] }), key0),
    'ERR_CORRUPT',
    `${key0} meta block 1: entry 0 (key 0) points at byte 0 of this object, not a meta block`,
  )
  throwsCode(
    () => decodeObject(part0({ index: [[0, 3, pointerLo(0, 2)]] }), key0),
    'ERR_CORRUPT',
    'meta block 1, a node of level 1, not 0',
  )
  throwsCode(
    () => decodeObject(part0({ index: [[1, 3, pointerLo(0, 1)]] }), key0),
    'ERR_CORRUPT',
    'meta block 0, whose keys 0..1 are not in [1, 4294967296)',
  )
  throwsCode(
    () => decodeObject(part0({ root: [0, 1] }), key0),
    'ERR_CORRUPT',
    `${key0}: header inode root: entry 0 (key 0)`,
    'a node of level 0, not 1',
  )
  throwsCode(
    () => decodeObject(part0({ root: [0, 4] }), key0),
    'ERR_CORRUPT',
    'points at byte 16384 of this object, not a meta block',
  )
})

// --- head first (PartedSegment) ---

function partedFields(part: number): ObjectFields {
  const f = fields(part)
  return {
    ...f,
    format: FORMAT_PARTED,
    baseInode: { ...f.baseInode, format: FORMAT_PARTED },
    inode: { ...f.inode, format: FORMAT_PARTED },
  }
}

/** 0000000003.2 head first: header, summary, padding (unit 0), the leaf (unit 1), blocks 10..12 (units 2..4). */
function partedPart2(
  leafEntries: [number, number, number][] = [10, 11, 12].map((k, i) => [k, 3, pointerLo(2, 2 + i)]),
) {
  const { data, summary } = slots([10, 11, 12])
  return encodeObject(partedFields(2), data, [node(0, leafEntries)], summary)
}

test('head first: encodeObject / decodeObject round trip, the format detected', () => {
  const bytes = partedPart2()
  assert.equal(bytes.length, 4096 + 4096 + 3 * 4096)
  assert.equal(new TextDecoder().decode(bytes.subarray(0, 8)), 'SSEGHEAD')
  const obj = decodeObject(bytes, '0000000003.2')
  assert.equal(obj.header.format, FORMAT_PARTED)
  assert.equal(obj.layout.dataOffset, 8192)
  assert.deepEqual(obj.summary, slots([10, 11, 12]).summary)
  assert.deepEqual(dataSlot(obj, 2), block(12))
  assert.deepEqual(bytes.subarray(8192 + 4096, 8192 + 8192), block(11))
  const { summary } = slots([10, 11, 12])
  assert.deepEqual(encodeObjectHead({ ...partedFields(2), metaCount: 1 }, summary), bytes.subarray(0, 4096))
})

test('head first: padding, pointers and the header are checked', () => {
  const key = '0000000003.2'
  const padded = partedPart2()
  padded[4000] = 1
  throwsCode(() => decodeObject(padded, key), 'ERR_CORRUPT', '0000000003.2: padding byte 4000 is not zero')
  // A leaf entry naming the leaf's own unit (1) rather than a data slot.
  throwsCode(
    () => decodeObject(partedPart2([[10, 3, pointerLo(2, 1)]]), key),
    'ERR_CORRUPT',
    'points at byte 4096 of this object, not a data slot',
  )
  // Tail-first offsets in a head-first object land in the head.
  throwsCode(
    () => decodeObject(partedPart2([[10, 3, pointerLo(2, 0)]]), key),
    'ERR_CORRUPT',
    'points at byte 0 of this object, not a data slot',
  )
  // A damaged head-first header is reported as such, not as "no header".
  const bad = partedPart2()
  bad[20] = 9
  throwsCode(() => decodeObject(bad, key), 'ERR_CORRUPT', '0000000003.2: header CRC')
  // Neither magic: both reasons.
  throwsCode(
    () => decodeObject(new Uint8Array(8192), key),
    'ERR_CORRUPT',
    'no header: its last 256 bytes are not a StreamSegment header (magic',
  )
  // A header's inodes must be of its own format.
  const mixed = { ...partedFields(2), inode: fields(2).inode }
  const { data, summary } = slots([10])
  throwsCode(
    () => encodeObject(mixed, data, [], summary),
    'ERR_INVALID_ARGUMENT',
    'inode: format 1, a PartedSegment header needs 2',
  )
})
