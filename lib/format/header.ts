/**
 * The segment header. A container's format, fixed when it is created, says where it is:
 *
 * ```text
 * StreamSegment (1, tail first):
 *   [n × dataBlockSize data][m × metaBlockSize meta][n × 16 summary][256 header]
 * PartedSegment (2, head first):
 *   [256 header][n × 16 summary][zeros to a 4 KiB boundary][m × metaBlockSize meta][n × dataBlockSize data]
 * ```
 *
 * A StreamSegment object can be sent while its data is still being chosen: a block's
 * place is final once placed, and what counts the blocks comes last. A PartedSegment
 * object is built whole before it is sent, and a reader gets its header from its first
 * bytes. Both keep every block a pointer names on a 4 KiB unit. The header, self-contained, is
 *
 * ```text
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |      magic "SSEGTAIL" (StreamSegment) or "SSEGHEAD" (8 bytes)  |    0
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
 * numbers: length 256, magic (the format's, or either when the caller does not know the
 * format), version (newer: ERR_UNSUPPORTED), CRC, counts (summaryCount = dataCount, and
 * the regions add up to exactly the object's size), names (cno and part are the key's,
 * CHECKPOINT iff part 0), then bounds: shifts, reserved bytes, flags, every block a
 * pointer can name (the last data block, and the last meta block: index nodes and roots
 * point at meta blocks too) starts below 1 GiB, both inodes valid with this header's
 * shifts and format, inode cno = cno for part 0 (<= cno for parts >= 1), base inode NULL
 * or with cno < cno.
 */

import { StreamSegmentError } from '../errors.js'
import { crc32 } from '../util/crc32.js'
import {
  decodeInode,
  encodeInode,
  FORMAT_PARTED,
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
export const HEAD_MAGIC = 'SSEGHEAD'
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
const MAGIC_HEAD = new TextEncoder().encode(HEAD_MAGIC)

/** The magic of a format's header: "SSEGTAIL" for StreamSegment, "SSEGHEAD" for PartedSegment. */
function magicOf(format: number): Uint8Array {
  return format === FORMAT_PARTED ? MAGIC_HEAD : MAGIC_TAIL
}

/** A container format's name, for messages. */
export function formatName(format: number): string {
  return format === FORMAT_STREAM ? 'StreamSegment' : format === FORMAT_PARTED ? 'PartedSegment' : `format ${format}`
}

/** A header in memory. On storage summaryCount is dataCount and version LAYOUT_VERSION. */
export interface Header {
  /** FORMAT_STREAM or FORMAT_PARTED: the container's, told by the magic. */
  format: number
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

/** Where each region of an object lies: [offset, end) in bytes, exact below 2^53. */
export interface ObjectLayout {
  format: number
  dataOffset: number
  dataEnd: number
  metaOffset: number
  metaEnd: number
  summaryOffset: number
  summaryEnd: number
  headerOffset: number
  objectSize: number
  dataBlockSize: number
  metaBlockSize: number
}

/** The layout of an object with these counts, in `shape.format` (StreamSegment when absent). */
export function objectLayout(
  counts: { dataCount: number; metaCount: number },
  shape: { dataShift: number; metaShift: number; format?: number },
): ObjectLayout {
  const format = shape.format ?? FORMAT_STREAM
  const dataBlockSize = 2 ** shape.dataShift
  const metaBlockSize = 2 ** shape.metaShift
  const dataBytes = counts.dataCount * dataBlockSize
  const metaBytes = counts.metaCount * metaBlockSize
  const summaryBytes = counts.dataCount * SUMMARY_ENTRY_BYTES
  if (format === FORMAT_PARTED) {
    const metaOffset = Math.ceil((HEADER_BYTES + summaryBytes) / UNIT_BYTES) * UNIT_BYTES
    const dataOffset = metaOffset + metaBytes
    return {
      format,
      headerOffset: 0,
      summaryOffset: HEADER_BYTES,
      summaryEnd: HEADER_BYTES + summaryBytes,
      metaOffset,
      metaEnd: dataOffset,
      dataOffset,
      dataEnd: dataOffset + dataBytes,
      objectSize: dataOffset + dataBytes,
      dataBlockSize,
      metaBlockSize,
    }
  }
  const metaOffset = dataBytes
  const summaryOffset = metaOffset + metaBytes
  const headerOffset = summaryOffset + summaryBytes
  return {
    format,
    dataOffset: 0,
    dataEnd: dataBytes,
    metaOffset,
    metaEnd: summaryOffset,
    summaryOffset,
    summaryEnd: headerOffset,
    headerOffset,
    objectSize: headerOffset + HEADER_BYTES,
    dataBlockSize,
    metaBlockSize,
  }
}

/** What is wrong with the header's fields other than its inodes (the "bounds" step), or undefined. */
export function headerFieldsProblem(h: Omit<Header, 'baseInode' | 'inode'>): string | undefined {
  if (h.format !== FORMAT_STREAM && h.format !== FORMAT_PARTED) return `format ${h.format} is not 1 or 2`
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
  const lastMeta = h.metaCount > 0 ? layout.metaEnd - layout.metaBlockSize : -1
  const lastData = h.dataCount > 0 ? layout.dataEnd - layout.dataBlockSize : -1
  const lastBlock = Math.max(lastMeta, lastData, 0)
  if (lastBlock / UNIT_BYTES > MAX_UNIT) {
    return `last ${lastBlock === lastMeta ? 'meta' : 'data'} block starts at byte ${lastBlock}, beyond the ${(MAX_UNIT + 1) * UNIT_BYTES} a pointer addresses`
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
  if (x.format !== h.format) return `format ${x.format}, a ${formatName(h.format)} header needs ${h.format}`
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
  out.set(magicOf(h.format), 0)
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

/** The format whose magic `bytes` start with, or undefined. */
export function headerMagicFormat(bytes: Uint8Array): number | undefined {
  if (bytes.length < MAGIC_TAIL.length) return undefined
  for (const format of [FORMAT_STREAM, FORMAT_PARTED]) {
    const magic = magicOf(format)
    let i = 0
    while (i < magic.length && bytes[i] === magic[i]) i++
    if (i === magic.length) return format
  }
  return undefined
}

/**
 * Decodes the 256-byte header `tail` of the object `<expected.cno>.<expected.part>`,
 * `objectSize` bytes long: its last 256 bytes in the StreamSegment format, its first in
 * the PartedSegment format. `expected.format` is the container's format; undefined
 * accepts either magic. Every failure is ERR_CORRUPT, but a newer version ERR_UNSUPPORTED.
 * `objectSize` undefined (a ranged read, which does not tell the size) skips the size check
 * only: the caller then checks `objectLayout(header, header).objectSize` when it learns it.
 */
export function decodeHeader(
  tail: Uint8Array,
  objectSize: number | undefined,
  expected: { cno: number; part: number; format?: number | undefined },
): Header {
  const key = segmentKey(expected.cno, expected.part)
  const fail = (msg: string) => StreamSegmentError.corrupt(`${key}: header ${msg}`)
  if (tail.length !== HEADER_BYTES) {
    throw fail(
      `is ${tail.length} bytes, expected ${HEADER_BYTES}${objectSize === undefined ? '' : ` (object has ${objectSize})`}`,
    )
  }
  const format = headerMagicFormat(tail)
  if (format === undefined || (expected.format !== undefined && format !== expected.format)) {
    const want =
      expected.format === undefined
        ? '"SSEGTAIL" or "SSEGHEAD"'
        : `${JSON.stringify(expected.format === FORMAT_PARTED ? HEAD_MAGIC : HEADER_MAGIC)} (${formatName(expected.format)})`
    throw fail(`magic ${JSON.stringify(latin1(tail.subarray(0, 8)))} is not ${want}`)
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
  const size = objectLayout({ dataCount, metaCount }, { dataShift, metaShift, format }).objectSize
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
    format,
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

/**
 * Format detection, first step: `tail`, an object's last 256 bytes, as a StreamSegment
 * header, or the ERR_CORRUPT saying why it is not one; the caller then reads the object's
 * first 256 bytes as a PartedSegment header (`detectedHeader`). A StreamSegment header of
 * a newer layout version is still ERR_UNSUPPORTED, thrown.
 */
export function streamHeaderOrWhy(
  tail: Uint8Array,
  objectSize: number | undefined,
  expected: { cno: number; part: number },
): Header | StreamSegmentError {
  try {
    return decodeHeader(tail, objectSize, { ...expected, format: FORMAT_STREAM })
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_CORRUPT')) return err
    throw err
  }
}

/**
 * Format detection, second step: `head`, the object's first 256 bytes, as a PartedSegment
 * header. When that fails too, the error is the one of the header the object has a magic
 * for (a damaged header of its own format), or one naming both reasons.
 */
export function detectedHeader(
  head: Uint8Array,
  tail: Uint8Array,
  objectSize: number | undefined,
  expected: { cno: number; part: number },
  notStream: StreamSegmentError,
): Header {
  try {
    return decodeHeader(head, objectSize, { ...expected, format: FORMAT_PARTED })
  } catch (err) {
    if (!StreamSegmentError.is(err, 'ERR_CORRUPT')) throw err
    if (headerMagicFormat(head) === FORMAT_PARTED) throw err
    if (headerMagicFormat(tail.subarray(Math.max(0, tail.length - HEADER_BYTES))) === FORMAT_STREAM) throw notStream
    const key = segmentKey(expected.cno, expected.part)
    const why = (e: Error) => e.message.replace(`${key}: header `, '')
    throw StreamSegmentError.corrupt(
      `${key}: no header: its last 256 bytes are not a StreamSegment header (${why(notStream)}), its first 256 not a PartedSegment header (${why(err)})`,
    )
  }
}
