import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  decodeHeader,
  emptyInode,
  encodeHeader,
  FLAG_CHECKPOINT,
  FLAG_PARTIAL,
  FLAG_SENT_AHEAD,
  FORMAT_PARTED,
  FORMAT_STREAM,
  HEADER_BYTES,
  type Header,
  type Inode,
  MAX_CNO,
  MAX_PART,
  objectLayout,
} from '../../lib/format/index.js'
import { arbInode, resealHeader, throwsCode, view } from '../helpers/format.js'

function inode(cno: number, patch: Partial<Inode> = {}): Inode {
  return { ...emptyInode({ dataShift: 12, metaShift: 12, ctimeMs: 1700000000000 }), cno, ...patch }
}

/** 0000000007.1: 4 data + 1 meta blocks of 4 KiB, 20800 bytes. */
function sample(patch: Partial<Header> = {}): Header {
  return {
    format: FORMAT_STREAM,
    flags: FLAG_SENT_AHEAD,
    dataShift: 12,
    metaShift: 12,
    cno: 7,
    part: 1,
    dataCount: 4,
    metaCount: 1,
    summaryCrc: 0xdeadbeef,
    createdMs: 1700001100000,
    baseInode: inode(6, {
      size: 4096,
      rootCount: 1,
      rootPtrHi: Uint32Array.of(6, 0, 0, 0),
      rootPtrLo: new Uint32Array(4),
    }),
    inode: inode(7, { size: 20000 }),
    ...patch,
  }
}
const SIZE = 20800
const name7 = { cno: 7, part: 1 }

test('objectLayout, head first: [256][n × 16][zeros to 4 KiB][m × meta][n × data]', () => {
  assert.deepEqual(
    objectLayout({ dataCount: 4, metaCount: 1 }, { dataShift: 12, metaShift: 12, format: FORMAT_PARTED }),
    {
      format: FORMAT_PARTED,
      headerOffset: 0,
      summaryOffset: 256,
      summaryEnd: 320,
      metaOffset: 4096,
      metaEnd: 8192,
      dataOffset: 8192,
      dataEnd: 24576,
      objectSize: 24576,
      dataBlockSize: 4096,
      metaBlockSize: 4096,
    },
  )
  // 240 entries end at byte 4096 exactly: no padding; 241 need a second unit.
  const at = (n: number) =>
    objectLayout({ dataCount: n, metaCount: 0 }, { dataShift: 12, metaShift: 12, format: FORMAT_PARTED })
  assert.equal(at(240).metaOffset, 4096)
  assert.equal(at(241).metaOffset, 8192)
  assert.equal(at(0).objectSize, 4096)
  // The last data block of a 1 GiB object still starts below 1 GiB, where a pointer reaches.
  const big = objectLayout(
    { dataCount: 2 ** 18 - 1026, metaCount: 0 },
    { dataShift: 12, metaShift: 12, format: FORMAT_PARTED },
  )
  assert.ok(big.dataEnd - 4096 < 2 ** 30)
})

test('objectLayout: [n × data][m × meta][n × 16][256]', () => {
  assert.deepEqual(objectLayout({ dataCount: 4, metaCount: 1 }, { dataShift: 12, metaShift: 12 }), {
    format: FORMAT_STREAM,
    dataOffset: 0,
    dataEnd: 16384,
    metaOffset: 16384,
    metaEnd: 20480,
    summaryOffset: 20480,
    summaryEnd: 20544,
    headerOffset: 20544,
    objectSize: 20800,
    dataBlockSize: 4096,
    metaBlockSize: 4096,
  })
  assert.equal(objectLayout({ dataCount: 0, metaCount: 0 }, { dataShift: 12, metaShift: 12 }).objectSize, 256)
  assert.equal(
    objectLayout({ dataCount: 64, metaCount: 2 }, { dataShift: 24, metaShift: 16 }).objectSize,
    2 ** 30 + 2 * 65536 + 64 * 16 + 256,
  )
})

test('header round trip, and the fields at their offsets', () => {
  const h = sample()
  const b = encodeHeader(h)
  assert.equal(b.length, HEADER_BYTES)
  const v = view(b)
  assert.equal(new TextDecoder().decode(b.subarray(0, 8)), 'SSEGTAIL')
  assert.deepEqual(
    [v.getUint16(8, true), v.getUint16(10, true), b[12], b[13], v.getUint16(14, true)],
    [1, FLAG_SENT_AHEAD, 12, 12, 0],
  )
  assert.deepEqual(
    [16, 20, 24, 28, 32, 36].map((o) => v.getUint32(o, true)),
    [7, 1, 4, 1, 4, 0xdeadbeef],
  )
  assert.equal(v.getUint32(56 + 8, true), 6) // base inode cno
  assert.equal(v.getUint32(152 + 8, true), 7) // inode cno
  assert.deepEqual(decodeHeader(b, SIZE, name7), h)
})

test('header round trip at the boundaries: MAX_CNO, MAX_PART, largest shifts, 2^53-1', () => {
  const shifts = { dataShift: 24, metaShift: 16 }
  const h: Header = {
    ...sample(),
    ...shifts,
    flags: FLAG_PARTIAL | FLAG_SENT_AHEAD,
    cno: MAX_CNO,
    part: MAX_PART,
    dataCount: 63,
    metaCount: 16, // the last meta block starts at 1008 MiB + 15 × 64 KiB, below 1 GiB
    summaryCrc: 0xffffffff,
    createdMs: Number.MAX_SAFE_INTEGER,
    baseInode: { ...inode(MAX_CNO - 1), ...shifts },
    inode: { ...inode(MAX_CNO), ...shifts, size: Number.MAX_SAFE_INTEGER },
  }
  const size = objectLayout(h, h).objectSize
  assert.deepEqual(decodeHeader(encodeHeader(h), size, { cno: MAX_CNO, part: MAX_PART }), h)
  const p0: Header = { ...h, flags: FLAG_CHECKPOINT | FLAG_PARTIAL | FLAG_SENT_AHEAD, part: 0, baseInode: emptyInode() }
  assert.deepEqual(decodeHeader(encodeHeader(p0), size, { cno: MAX_CNO, part: 0 }), p0)
})

test("decodeHeader: an inode's size past 2^32 blocks is refused, in the inode and in the base inode", () => {
  const largest = 2 ** 44 // 2^32 blocks of 4 KiB
  assert.equal(
    decodeHeader(encodeHeader(sample({ inode: inode(7, { size: largest }) })), SIZE, name7).inode.size,
    largest,
  )
  for (const [at, what] of [
    [152, 'header inode'],
    [56, 'header base inode'],
  ] as const) {
    const t = encodeHeader(sample()).slice()
    view(t).setUint32(at, 1, true)
    view(t).setUint32(at + 4, 2 ** 12, true) // 2^44 + 1
    throwsCode(
      () => decodeHeader(resealHeader(t), SIZE, name7),
      'ERR_CORRUPT',
      `0000000007.1: ${what}: size ${largest + 1} is past the largest file`,
    )
  }
})

test('every block a pointer names starts below 1 GiB', () => {
  const at = (dataCount: number, metaCount: number) => {
    const h = sample({ dataCount, metaCount })
    return () => decodeHeader(encodeHeader(h), objectLayout(h, h).objectSize, name7)
  }
  at(2 ** 18, 0)() // the last data block starts at unit MAX_UNIT
  at(2 ** 18 - 1, 1)() // so does the meta block
  throwsCode(at(2 ** 18, 1), 'ERR_INVALID_ARGUMENT', 'last meta block starts at byte 1073741824')
  throwsCode(at(2 ** 18 + 1, 0), 'ERR_INVALID_ARGUMENT', 'last data block starts at byte 1073741824')
  const h = sample({ dataCount: 2 ** 18, metaCount: 1 })
  const tail = resealHeader(encodeHeader(sample()).slice())
  view(tail).setUint32(24, h.dataCount, true)
  view(tail).setUint32(32, h.dataCount, true)
  resealHeader(tail)
  throwsCode(
    () => decodeHeader(tail, objectLayout(h, h).objectSize, name7),
    'ERR_CORRUPT',
    '0000000007.1: header last meta block starts at byte 1073741824, beyond the 1073741824 a pointer addresses',
  )
})

test('header round trip (fast-check)', () => {
  const arb = fc
    .record({
      cno: fc.oneof(fc.constantFrom(1, MAX_CNO), fc.integer({ min: 1, max: MAX_CNO })),
      part: fc.oneof(fc.constantFrom(0, 1, MAX_PART), fc.integer({ min: 0, max: MAX_PART })),
      dataShift: fc.integer({ min: 12, max: 24 }),
      metaShift: fc.integer({ min: 12, max: 16 }),
      // At most 63 blocks of 16 MiB and 16 of 64 KiB: every block within the 1 GiB a pointer reaches.
      dataCount: fc.integer({ min: 0, max: 63 }),
      metaCount: fc.integer({ min: 0, max: 16 }),
      extraFlags: fc.constantFrom(0, FLAG_PARTIAL, FLAG_SENT_AHEAD, FLAG_PARTIAL | FLAG_SENT_AHEAD),
      summaryCrc: fc.integer({ min: 0, max: 0xffffffff }),
      createdMs: fc.maxSafeNat(),
      newContainer: fc.boolean(),
      format: fc.constantFrom(FORMAT_STREAM, FORMAT_PARTED),
    })
    .chain(({ extraFlags, newContainer, ...r }) => {
      const fixed = { format: r.format, dataShift: r.dataShift, metaShift: r.metaShift }
      return fc.record({
        baseInode: newContainer
          ? fc.constant(emptyInode())
          : fc.integer({ min: 0, max: r.cno - 1 }).chain((cno) => arbInode({ ...fixed, cno })),
        inode:
          r.part === 0
            ? arbInode({ ...fixed, cno: r.cno })
            : fc.integer({ min: 0, max: r.cno }).chain((cno) => arbInode({ ...fixed, cno })),
        rest: fc.constant({ ...r, flags: extraFlags | (r.part === 0 ? FLAG_CHECKPOINT : 0) }),
      })
    })
    .map(({ rest, ...inodes }): Header => ({ ...rest, ...inodes }))
  fc.assert(
    fc.property(arb, (h) => {
      const size = objectLayout(h, h).objectSize
      assert.deepEqual(decodeHeader(encodeHeader(h), size, { cno: h.cno, part: h.part }), h)
    }),
  )
})

test('decodeHeader: length, magic, version, CRC, in that order', () => {
  const good = () => encodeHeader(sample()).slice()
  throwsCode(
    () => decodeHeader(good().subarray(1), SIZE, name7),
    'ERR_CORRUPT',
    '0000000007.1: header is 255 bytes, expected 256',
  )
  throwsCode(() => decodeHeader(new Uint8Array(100), 100, name7), 'ERR_CORRUPT', 'is 100 bytes')
  let b = good()
  b[7] = 0x4d
  throwsCode(() => decodeHeader(b, SIZE, name7), 'ERR_CORRUPT', 'magic "SSEGTAIM"')
  b = good()
  view(b).setUint16(8, 2, true)
  throwsCode(
    () => decodeHeader(b, SIZE, name7),
    'ERR_UNSUPPORTED',
    '0000000007.1: header layout version 2, this build reads 1',
  )
  view(b).setUint16(8, 0xffff, true)
  throwsCode(() => decodeHeader(b, SIZE, name7), 'ERR_UNSUPPORTED', 'version 65535')
  view(b).setUint16(8, 0, true)
  throwsCode(() => decodeHeader(b, SIZE, name7), 'ERR_CORRUPT', 'layout version 0')
  for (const bit of [0, 100, 8 * 40 + 3, 8 * 200, 8 * 252, 8 * 255 + 7]) {
    b = good()
    b[bit >> 3] = b[bit >> 3]! ^ (1 << (bit & 7))
    const re = /0000000007\.1: header (CRC 0x[0-9a-f]{8} stored, 0x[0-9a-f]{8} computed|magic)/
    throwsCode(() => decodeHeader(b, SIZE, name7), 'ERR_CORRUPT', re)
  }
})

test('decodeHeader: counts add up to exactly the object size', () => {
  const b = encodeHeader(sample())
  throwsCode(
    () => decodeHeader(b, 20480, name7),
    'ERR_CORRUPT',
    '0000000007.1: header counts 4 data + 1 meta blocks + 4 summary entries = 20800 bytes, object has 20480',
  )
  throwsCode(() => decodeHeader(b, SIZE + 1, name7), 'ERR_CORRUPT', '20800 bytes, object has 20801')
  const t = b.slice()
  view(t).setUint32(32, 3, true)
  throwsCode(
    () => decodeHeader(resealHeader(t), SIZE, name7),
    'ERR_CORRUPT',
    'counts 4 data blocks but 3 summary entries',
  )
  // A corrupt shift still gives a finite, different size.
  const s = b.slice()
  s[12] = 255
  throwsCode(() => decodeHeader(resealHeader(s), SIZE, name7), 'ERR_CORRUPT', 'counts 4 data + 1 meta')
})

test('decodeHeader: the header names the object it was read from', () => {
  const b = encodeHeader(sample())
  throwsCode(() => decodeHeader(b, SIZE, { cno: 8, part: 1 }), 'ERR_CORRUPT', '0000000008.1: header names cno 7 part 1')
  throwsCode(() => decodeHeader(b, SIZE, { cno: 7, part: 2 }), 'ERR_CORRUPT', '0000000007.2: header names cno 7 part 1')
  const t = b.slice()
  view(t).setUint16(10, FLAG_CHECKPOINT | FLAG_SENT_AHEAD, true)
  throwsCode(() => decodeHeader(resealHeader(t), SIZE, name7), 'ERR_CORRUPT', 'CHECKPOINT flag is set on part 1')
  view(t).setUint16(10, 0, true)
  view(t).setUint32(20, 0, true)
  throwsCode(
    () => decodeHeader(resealHeader(t), SIZE, { cno: 7, part: 0 }),
    'ERR_CORRUPT',
    'CHECKPOINT flag is clear on part 0',
  )
})

test("decodeHeader: every field's bounds, with the numbers", () => {
  const cases: [(v: DataView, b: Uint8Array) => void, ...string[]][] = [
    [(v) => v.setUint8(12, 11), 'dataShift 11 is not in 12..24'],
    [(v) => v.setUint8(13, 17), 'metaShift 17 is not in 12..16'],
    [(v) => v.setUint16(14, 1, true), 'reserved field'],
    [(_, b) => (b[55] = 1), 'reserved byte 55'],
    [(v) => v.setUint32(248, 1, true), 'reserved field'],
    [(v) => v.setUint16(10, 8 | FLAG_SENT_AHEAD, true), 'unknown flags 0xc'],
    [(v) => v.setUint32(44, 0x200000, true), 'createdMs'],
    [(v) => v.setUint8(152 + 12, 2), 'inode: format 2, a StreamSegment header needs 1'],
    [(v) => v.setUint8(152 + 12, 7), 'header inode: format 7'],
    [(v) => v.setUint32(152 + 8, 8, true), "inode cno 8 is above the header's cno 7"],
    [(v) => v.setUint32(56 + 8, 7, true), "base inode cno 7 is not below the header's cno 7"],
    [(v) => v.setUint32(56 + 8, 5, true), 'base inode: root entry 0', 'newer than cno 5'],
    [(v) => v.setUint8(56 + 14, 13), "base inode: shifts 12/13 differ from the header's 12/12"],
    [(v) => v.setUint8(56 + 15, 9), 'header base inode: rootLevel 9'],
  ]
  for (const [mutate, ...msg] of cases) {
    const t = encodeHeader(sample()).slice()
    const v = view(t)
    mutate(v, t)
    // The size the (mutated) counts and shifts give, to get past the counts check.
    const size = objectLayout(
      { dataCount: v.getUint32(24, true), metaCount: v.getUint32(28, true) },
      { dataShift: v.getUint8(12), metaShift: v.getUint8(13) },
    ).objectSize
    throwsCode(() => decodeHeader(resealHeader(t), size, name7), 'ERR_CORRUPT', '0000000007.1: header ', ...msg)
  }
  // Part 0 carries the checkpoint's inode: its cno is the header's.
  const p0 = sample({ part: 0, flags: FLAG_CHECKPOINT })
  const t = encodeHeader({ ...p0, inode: inode(7) }).slice()
  view(t).setUint32(152 + 8, 6, true)
  throwsCode(
    () => decodeHeader(resealHeader(t), SIZE, { cno: 7, part: 0 }),
    'ERR_CORRUPT',
    "inode cno 6 is not the header's cno 7",
  )
})

test('encodeHeader refuses what decodeHeader would refuse', () => {
  const bad: [Partial<Header>, string][] = [
    [{ cno: 0 }, 'cno 0'],
    [{ part: MAX_PART + 1 }, `part ${MAX_PART + 1}`],
    [{ flags: FLAG_CHECKPOINT }, 'CHECKPOINT flag is set on part 1'],
    [{ flags: 16 }, 'unknown flags 0x10'],
    [{ dataCount: -1 }, 'counts -1 data'],
    [{ summaryCrc: 2 ** 32 }, 'summaryCrc'],
    [{ inode: inode(9) }, 'inode cno 9'],
    [{ inode: emptyInode() }, 'inode: format 0'],
    [{ baseInode: inode(7) }, 'base inode cno 7'],
    [{ createdMs: -5 }, 'createdMs -5'],
  ]
  for (const [patch, msg] of bad) throwsCode(() => encodeHeader(sample(patch)), 'ERR_INVALID_ARGUMENT', msg)
  throwsCode(() => encodeHeader(sample(), new Uint8Array(300), 100), 'ERR_INVALID_ARGUMENT', 'no 256 bytes at 100')
  // Into a larger buffer at an offset.
  const big = new Uint8Array(300)
  encodeHeader(sample(), big, 44)
  assert.deepEqual(big.subarray(44), encodeHeader(sample()))
})
