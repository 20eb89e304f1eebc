/**
 * The segment header: the last 256 bytes of every segment object. A segment object is
 *
 * ```text
 * [n × dataBlockSize data][m × metaBlockSize meta][n × 16 summary][256 header]
 * ```
 *
 * and its header, self-contained, is
 *
 * ```text
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |                      magic "SSEGTAIL" (8 bytes)               |    0
 * +-------------------------------+-------------------------------+
 * |        version (u16) = 1      |          flags (u16)          |    8
 * +---------------+---------------+-------------------------------+
 * | dataShift (u8)| metaShift (u8)|        reserved (u16) = 0     |   12
 * +---------------+---------------+-------------------------------+
 * |                           cno (u32)                           |   16
 * |                           part (u32)                          |   20
 * |                    dataCount (u32) = n data blocks            |   24
 * |                    metaCount (u32) = m meta blocks            |   28
 * |                  summaryCount (u32) = n entries               |   32
 * |          summaryCrc (u32) CRC-32 of the n × 16 summary bytes  |   36
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |                 createdMs (u64, ms since epoch)               |   40
 * |                     reserved (8 bytes) = 0                    |   48
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |        baseInode (96 bytes): the inode the checkpoint was     |   56
 * |        built on; the NULL inode for a new container           |
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |        inode (96 bytes): part 0, the checkpoint's inode;      |  152
 * |        parts >= 1, the file's inode when the object was built |
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |                      reserved (u32) = 0                       |  248
 * |                 crc (u32) CRC-32 of bytes 0..252              |  252
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * ```
 *
 * flags: bit0 CHECKPOINT (set iff part 0), bit1 PARTIAL (written under memory pressure),
 * bit2 SENT_AHEAD; other bits zero. `decodeHeader` checks, in this order and stating the
 * numbers: length 256, magic, version (newer: ERR_UNSUPPORTED), CRC, counts (summaryCount
 * = dataCount, and the regions add up to exactly the object's size), names (cno and part
 * are the key's, CHECKPOINT iff part 0), then bounds: shifts, reserved bytes, flags, every
 * block a pointer can name (the last data block, and the last meta block: index nodes and
 * roots point at meta blocks too) starts below 1 GiB, both inodes valid with this
 * header's shifts and format 1, inode cno = cno for part 0 (<= cno for parts >= 1), base
 * inode NULL or with cno < cno.
 */
import { crc32 } from '../crc32.js'
import { StreamSegmentError } from '../errors.js'
import {
  decodeInode,
  encodeInode,
  FORMAT_STREAM,
  INODE_BYTES,
  type Inode,
  inodeProblem,
  isNullInode,
  LAYOUT_VERSION,
  latin1,
  MAX_DATA_SHIFT,
  MAX_META_SHIFT,
  MIN_DATA_SHIFT,
  MIN_META_SHIFT,
} from './inode.js'
import { segmentKey } from './names.js'
import {
  dataView,
  firstNonZero,
  hex32,
  isUint,
  MAX_CNO,
  MAX_PART,
  MAX_UNIT,
  readU64,
  UNIT_BYTES,
  writeU64,
} from './pointer.js'

export const HEADER_BYTES = 256
export const HEADER_MAGIC = 'SSEGTAIL'
export const SUMMARY_ENTRY_BYTES = 16
export const FLAG_CHECKPOINT = 1
export const FLAG_PARTIAL = 2
export const FLAG_SENT_AHEAD = 4
const KNOWN_FLAGS = FLAG_CHECKPOINT | FLAG_PARTIAL | FLAG_SENT_AHEAD

const H_VERSION = 8
const H_FLAGS = 10
const H_DATA_SHIFT = 12
const H_META_SHIFT = 13
const H_RESERVED_A = 14 // u16
const H_CNO = 16
const H_PART = 20
const H_DATA_COUNT = 24
const H_META_COUNT = 28
const H_SUMMARY_COUNT = 32
const H_SUMMARY_CRC = 36
const H_CREATED = 40
const H_RESERVED_B = 48 // 8 bytes
const H_BASE_INODE = 56
const H_INODE = H_BASE_INODE + INODE_BYTES // 152
const H_RESERVED_C = H_INODE + INODE_BYTES // 248, u32
const H_CRC = 252
const MAGIC_TAIL = new TextEncoder().encode(HEADER_MAGIC)

/** A header in memory. On storage summaryCount is dataCount and version LAYOUT_VERSION. */
export interface Header {
  flags: number
  dataShift: number
  metaShift: number
  cno: number
  part: number
  dataCount: number
  metaCount: number
  summaryCrc: number
  createdMs: number
  baseInode: Inode
  inode: Inode
}

export interface ObjectLayout {
  dataOffset: number
  metaOffset: number
  summaryOffset: number
  headerOffset: number
  objectSize: number
  dataBlockSize: number
  metaBlockSize: number
}

/** Where each region of an object starts (byte offsets; exact below 2^53). */
export function objectLayout(
  counts: { dataCount: number; metaCount: number },
  shifts: { dataShift: number; metaShift: number },
): ObjectLayout {
  const dataBlockSize = 2 ** shifts.dataShift
  const metaBlockSize = 2 ** shifts.metaShift
  const metaOffset = counts.dataCount * dataBlockSize
  const summaryOffset = metaOffset + counts.metaCount * metaBlockSize
  const headerOffset = summaryOffset + counts.dataCount * SUMMARY_ENTRY_BYTES
  const objectSize = headerOffset + HEADER_BYTES
  return { dataOffset: 0, metaOffset, summaryOffset, headerOffset, objectSize, dataBlockSize, metaBlockSize }
}

/** What is wrong with the header's fields other than its inodes (the "bounds" step), or undefined. */
export function headerFieldsProblem(h: Omit<Header, 'baseInode' | 'inode'>): string | undefined {
  if (!(isUint(h.dataShift, MAX_DATA_SHIFT) && h.dataShift >= MIN_DATA_SHIFT)) {
    return `dataShift ${h.dataShift} is not in ${MIN_DATA_SHIFT}..${MAX_DATA_SHIFT}`
  }
  if (!(isUint(h.metaShift, MAX_META_SHIFT) && h.metaShift >= MIN_META_SHIFT)) {
    return `metaShift ${h.metaShift} is not in ${MIN_META_SHIFT}..${MAX_META_SHIFT}`
  }
  if (!isUint(h.flags, 0xffff) || (h.flags & ~KNOWN_FLAGS) !== 0) return `unknown flags 0x${h.flags.toString(16)}`
  if (!isUint(h.cno, MAX_CNO) || h.cno === 0) return `cno ${h.cno} is not in 1..${MAX_CNO}`
  if (!isUint(h.part, MAX_PART)) return `part ${h.part} is not in 0..${MAX_PART}`
  if (((h.flags & FLAG_CHECKPOINT) !== 0) !== (h.part === 0)) {
    return `CHECKPOINT flag is ${h.flags & FLAG_CHECKPOINT ? 'set' : 'clear'} on part ${h.part}`
  }
  if (!isUint(h.dataCount, 0xffffffff) || !isUint(h.metaCount, 0xffffffff)) {
    return `counts ${h.dataCount} data + ${h.metaCount} meta are not u32`
  }
  const layout = objectLayout(h, h)
  // Every block a pointer can name must start at a unit below 2^18 (1 GiB).
  const lastBlock =
    h.metaCount > 0
      ? layout.summaryOffset - layout.metaBlockSize
      : h.dataCount > 0
        ? layout.metaOffset - layout.dataBlockSize
        : 0
  if (lastBlock / UNIT_BYTES > MAX_UNIT) {
    return `last ${h.metaCount > 0 ? 'meta' : 'data'} block starts at byte ${lastBlock}, beyond the ${(MAX_UNIT + 1) * UNIT_BYTES} a pointer addresses`
  }
  if (!isUint(h.summaryCrc, 0xffffffff)) return `summaryCrc ${h.summaryCrc} is not a u32`
  if (!isUint(h.createdMs, Number.MAX_SAFE_INTEGER)) return `createdMs ${h.createdMs} is not in 0..2^53-1`
  return undefined
}

/** What is wrong with the header's inodes, given fields that passed `headerFieldsProblem`. */
export function headerInodesProblem(h: Header): string | undefined {
  const problem = inodeProblem(h.inode)
  if (problem !== undefined) return `inode: ${problem}`
  const inodeMismatch = sameContainer(h.inode, h)
  if (inodeMismatch !== undefined) return `inode: ${inodeMismatch}`
  if (h.part === 0 ? h.inode.cno !== h.cno : h.inode.cno > h.cno) {
    return `inode cno ${h.inode.cno} ${h.part === 0 ? 'is not' : 'is above'} the header's cno ${h.cno}`
  }
  const baseProblem = inodeProblem(h.baseInode)
  if (baseProblem !== undefined) return `base inode: ${baseProblem}`
  if (!isNullInode(h.baseInode)) {
    const baseMismatch = sameContainer(h.baseInode, h)
    if (baseMismatch !== undefined) return `base inode: ${baseMismatch}`
    if (h.baseInode.cno >= h.cno) return `base inode cno ${h.baseInode.cno} is not below the header's cno ${h.cno}`
  }
  return undefined
}

function sameContainer(x: Inode, h: Header): string | undefined {
  if (x.format !== FORMAT_STREAM) return `format ${x.format}, a StreamSegment header needs ${FORMAT_STREAM}`
  if (x.dataShift !== h.dataShift || x.metaShift !== h.metaShift) {
    return `shifts ${x.dataShift}/${x.metaShift} differ from the header's ${h.dataShift}/${h.metaShift}`
  }
  return undefined
}

/** Encodes a header (into `into` at `offset`, or a new 256-byte array); returns its bytes. */
export function encodeHeader(h: Header, into = new Uint8Array(HEADER_BYTES), offset = 0): Uint8Array {
  const problem = headerFieldsProblem(h) ?? headerInodesProblem(h)
  if (problem !== undefined) throw StreamSegmentError.invalidArgument(`header: ${problem}`)
  const out = into.subarray(offset, offset + HEADER_BYTES)
  if (out.length !== HEADER_BYTES) throw StreamSegmentError.invalidArgument(`header: no 256 bytes at ${offset}`)
  out.fill(0)
  const v = dataView(out)
  out.set(MAGIC_TAIL, 0)
  v.setUint16(H_VERSION, LAYOUT_VERSION, true)
  v.setUint16(H_FLAGS, h.flags, true)
  v.setUint8(H_DATA_SHIFT, h.dataShift)
  v.setUint8(H_META_SHIFT, h.metaShift)
  v.setUint32(H_CNO, h.cno, true)
  v.setUint32(H_PART, h.part, true)
  v.setUint32(H_DATA_COUNT, h.dataCount, true)
  v.setUint32(H_META_COUNT, h.metaCount, true)
  v.setUint32(H_SUMMARY_COUNT, h.dataCount, true)
  v.setUint32(H_SUMMARY_CRC, h.summaryCrc, true)
  writeU64(v, H_CREATED, h.createdMs)
  encodeInode(out, H_BASE_INODE, h.baseInode)
  encodeInode(out, H_INODE, h.inode)
  v.setUint32(H_CRC, crc32(out.subarray(0, H_CRC)), true)
  return out
}

/**
 * Decodes the last 256 bytes (`tail`) of the object `<expected.cno>.<expected.part>`,
 * `objectSize` bytes long. Every failure is ERR_CORRUPT, but a newer version ERR_UNSUPPORTED.
 * `objectSize` undefined (a suffix read, which does not tell the size) skips the size check
 * only: the caller then checks `objectLayout(header, header).objectSize` when it learns it.
 */
export function decodeHeader(
  tail: Uint8Array,
  objectSize: number | undefined,
  expected: { cno: number; part: number },
): Header {
  const key = segmentKey(expected.cno, expected.part)
  const fail = (msg: string) => StreamSegmentError.corrupt(`${key}: header ${msg}`)
  if (tail.length !== HEADER_BYTES) {
    throw fail(
      `is ${tail.length} bytes, expected ${HEADER_BYTES}${objectSize === undefined ? '' : ` (object has ${objectSize})`}`,
    )
  }
  for (let i = 0; i < MAGIC_TAIL.length; i++) {
    if (tail[i] !== MAGIC_TAIL[i]) throw fail(`magic ${JSON.stringify(latin1(tail.subarray(0, 8)))} is not "SSEGTAIL"`)
  }
  const v = dataView(tail)
  const version = v.getUint16(H_VERSION, true)
  if (version > LAYOUT_VERSION) {
    throw StreamSegmentError.unsupported(`${key}: header layout version ${version}, this build reads ${LAYOUT_VERSION}`)
  }
  if (version === 0) throw fail('layout version 0')
  const stored = v.getUint32(H_CRC, true)
  const computed = crc32(tail.subarray(0, H_CRC))
  if (stored !== computed) throw fail(`CRC ${hex32(stored)} stored, ${hex32(computed)} computed`)

  const dataCount = v.getUint32(H_DATA_COUNT, true)
  const metaCount = v.getUint32(H_META_COUNT, true)
  const summaryCount = v.getUint32(H_SUMMARY_COUNT, true)
  const dataShift = v.getUint8(H_DATA_SHIFT)
  const metaShift = v.getUint8(H_META_SHIFT)
  if (summaryCount !== dataCount) throw fail(`counts ${dataCount} data blocks but ${summaryCount} summary entries`)
  const size = objectLayout({ dataCount, metaCount }, { dataShift, metaShift }).objectSize
  if (objectSize !== undefined && size !== objectSize) {
    throw fail(
      `counts ${dataCount} data + ${metaCount} meta blocks + ${summaryCount} summary entries = ${size} bytes, object has ${objectSize}`,
    )
  }
  const cno = v.getUint32(H_CNO, true)
  const part = v.getUint32(H_PART, true)
  const flags = v.getUint16(H_FLAGS, true)
  if (cno !== expected.cno || part !== expected.part) throw fail(`names cno ${cno} part ${part}`)
  if (((flags & FLAG_CHECKPOINT) !== 0) !== (part === 0)) {
    throw fail(`CHECKPOINT flag is ${flags & FLAG_CHECKPOINT ? 'set' : 'clear'} on part ${part}`)
  }

  if (v.getUint16(H_RESERVED_A, true) !== 0 || v.getUint32(H_RESERVED_C, true) !== 0) {
    throw fail('reserved field is not zero')
  }
  const reserved = firstNonZero(tail, H_RESERVED_B, H_BASE_INODE)
  if (reserved >= 0) throw fail(`reserved byte ${reserved} is not zero`)
  const fields = {
    flags,
    dataShift,
    metaShift,
    cno,
    part,
    dataCount,
    metaCount,
    summaryCrc: v.getUint32(H_SUMMARY_CRC, true),
    createdMs: readU64(v, H_CREATED),
  }
  const problem = headerFieldsProblem(fields)
  if (problem !== undefined) throw fail(problem)
  const h: Header = {
    ...fields,
    baseInode: decodeInode(tail, H_BASE_INODE, `${key}: header base inode`),
    inode: decodeInode(tail, H_INODE, `${key}: header inode`),
  }
  const inodesProblem = headerInodesProblem(h)
  if (inodesProblem !== undefined) throw fail(inodesProblem)
  return h
}
