/**
 * The inode: a 96-byte record describing the file at one checkpoint. It is embedded twice
 * in every segment header (header.ts) and once in the `inode` object, the commit point.
 *
 * ```text
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |        size (u64, bytes, <= 2^53-1 and <= 2^32 blocks)        |   0
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |                 cno (u32, 0 = no checkpoint yet)              |   8
 * +---------------+---------------+---------------+---------------+
 * |  format (u8)  | dataShift(u8) | metaShift(u8) | rootLevel(u8) |  12
 * +---------------+---------------+---------------+---------------+
 * |       rootCount (u16, 0..4)   |        reserved (u16) = 0     |  16
 * +-------------------------------+-------------------------------+
 * |                      reserved (u32) = 0                       |  20
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |        ctimeMs (u64, container creation, ms since epoch)      |  24
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |        mtimeMs (u64, this checkpoint's time)                  |  32
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |  root[0..3]: { key u32, ptrLo u32, ptrHi u32 } x 4 (48 bytes) |  40
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |                    reserved (8 bytes) = 0                     |  88
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * ```
 *
 * format: 1 StreamSegment (tail-first), 2 PartedSegment (head-first). dataShift 12..24,
 * metaShift 12..16. rootLevel 0: the root entries are data pointers (ZERO allowed);
 * L >= 1 (max 8): they point at block-map nodes of level L-1 (never ZERO). Root keys are
 * strictly increasing over rootCount, unused entries all zero, root pointers no newer
 * than the inode's cno. The size is at most 2^32 blocks (block indexes are 32 bits), as a
 * writer caps it. The all-zero record is the NULL inode (a new container's base inode);
 * it is the only valid record with format 0.
 *
 * The `inode` object (128 bytes), replaced by compare-and-swap to publish a checkpoint:
 *
 * ```text
 *   0  magic     8 bytes "SSEGINOD"
 *   8  version   u16 = 1 (newer: ERR_UNSUPPORTED)
 *  10  flags     u16 = 0
 *  12  reserved  u32 = 0
 *  16  inode     96 bytes (not NULL, cno >= 1: checkpoints are numbered from 1)
 * 112  reserved  12 bytes = 0
 * 124  crc       u32 CRC-32 of bytes 0..124
 * ```
 */

import { StreamSegmentError } from '../errors.js'
import { crc32 } from '../util/crc32.js'
import { dataView, firstNonZero, hex32, isUint, MAX_CNO, pointerProblem, readU64, writeU64 } from './pointer.js'

export const INODE_BYTES = 96
export const ROOT_ENTRIES = 4
export const MAX_ROOT_LEVEL = 8
export const FORMAT_STREAM = 1
export const FORMAT_PARTED = 2
export const MIN_DATA_SHIFT = 12
export const MAX_DATA_SHIFT = 24
export const MIN_META_SHIFT = 12
export const MAX_META_SHIFT = 16
/** The one layout version this build writes and reads (header and inode object). */
export const LAYOUT_VERSION = 1

const I_SIZE = 0
const I_CNO = 8
const I_FORMAT = 12
const I_DATA_SHIFT = 13
const I_META_SHIFT = 14
const I_ROOT_LEVEL = 15
const I_ROOT_COUNT = 16
const I_RESERVED_A = 18 // u16 + u32, bytes 18..24
const I_CTIME = 24
const I_MTIME = 32
const I_ROOT = 40
const ROOT_ENTRY_BYTES = 12
const I_RESERVED_B = 88 // bytes 88..96

export interface Inode {
  size: number
  cno: number
  format: number
  dataShift: number
  metaShift: number
  rootLevel: number
  rootCount: number
  ctimeMs: number
  mtimeMs: number
  /** Length >= 4; entries at and past rootCount are zero. */
  rootKeys: Uint32Array
  rootPtrHi: Uint32Array
  rootPtrLo: Uint32Array
}

/**
 * Without `init`, the NULL inode (all zero: the base of a new container's first
 * checkpoint). With it, a new container's inode: cno 0, size 0, empty root.
 */
export function emptyInode(init?: { format?: number; dataShift: number; metaShift: number; ctimeMs: number }): Inode {
  return {
    size: 0,
    cno: 0,
    format: init === undefined ? 0 : (init.format ?? FORMAT_STREAM),
    dataShift: init?.dataShift ?? 0,
    metaShift: init?.metaShift ?? 0,
    rootLevel: 0,
    rootCount: 0,
    ctimeMs: init?.ctimeMs ?? 0,
    mtimeMs: init?.ctimeMs ?? 0,
    rootKeys: new Uint32Array(ROOT_ENTRIES),
    rootPtrHi: new Uint32Array(ROOT_ENTRIES),
    rootPtrLo: new Uint32Array(ROOT_ENTRIES),
  }
}

export function isNullInode(x: Inode): boolean {
  if (x.size !== 0 || x.cno !== 0 || x.format !== 0 || x.dataShift !== 0 || x.metaShift !== 0) return false
  if (x.rootLevel !== 0 || x.rootCount !== 0 || x.ctimeMs !== 0 || x.mtimeMs !== 0) return false
  for (let i = 0; i < ROOT_ENTRIES; i++) {
    if (x.rootKeys[i] !== 0 || x.rootPtrHi[i] !== 0 || x.rootPtrLo[i] !== 0) return false
  }
  return true
}

/** The largest file at blocks of 2^dataShift bytes: 2^32 blocks (as writes are capped). */
/**
 * Whether an object whose header carries an inode made at `ctimeMs` may be of the container
 * made at `containerCtimeMs`, and not of one removed and made again at its place since
 * (whose objects have the same names). A header holds its writer's inode: the container's
 * creation time, or, for a writer that lost the race to create the container and put its
 * view on top of the winner's, that writer's own, no later than the checkpoint it
 * published. A container made again later was made after every checkpoint of this one and
 * after the reader opened it: `notAfterMs` is the latest of those times the caller knows.
 */
export function madeHere(ctimeMs: number, containerCtimeMs: number, notAfterMs: number): boolean {
  return ctimeMs === containerCtimeMs || ctimeMs <= notAfterMs
}

export function maxFileSize(dataShift: number): number {
  return 2 ** (32 + dataShift)
}

/** What is wrong with `x` as an in-memory inode (bounds only), or undefined. */
export function inodeProblem(x: Inode): string | undefined {
  if (
    !(x.rootKeys.length >= ROOT_ENTRIES && x.rootPtrHi.length >= ROOT_ENTRIES && x.rootPtrLo.length >= ROOT_ENTRIES)
  ) {
    return `root arrays must hold ${ROOT_ENTRIES} entries`
  }
  if (isNullInode(x)) return undefined
  if (x.format !== FORMAT_STREAM && x.format !== FORMAT_PARTED) return `format ${x.format} is not 1 or 2`
  if (!isUint(x.size, Number.MAX_SAFE_INTEGER)) return `size ${x.size} is not in 0..2^53-1`
  if (!isUint(x.cno, MAX_CNO)) return `cno ${x.cno} is not in 0..${MAX_CNO}`
  if (!(isUint(x.dataShift, MAX_DATA_SHIFT) && x.dataShift >= MIN_DATA_SHIFT)) {
    return `dataShift ${x.dataShift} is not in ${MIN_DATA_SHIFT}..${MAX_DATA_SHIFT}`
  }
  if (!(isUint(x.metaShift, MAX_META_SHIFT) && x.metaShift >= MIN_META_SHIFT)) {
    return `metaShift ${x.metaShift} is not in ${MIN_META_SHIFT}..${MAX_META_SHIFT}`
  }
  // Block indexes are 32 bits: a larger size would read as zeros past the last block forever.
  if (x.size > maxFileSize(x.dataShift)) {
    return `size ${x.size} is past the largest file, 2^32 blocks of ${2 ** x.dataShift} bytes = ${maxFileSize(x.dataShift)} bytes`
  }
  if (!isUint(x.rootLevel, MAX_ROOT_LEVEL)) return `rootLevel ${x.rootLevel} is not in 0..${MAX_ROOT_LEVEL}`
  if (!isUint(x.rootCount, ROOT_ENTRIES)) return `rootCount ${x.rootCount} is not in 0..${ROOT_ENTRIES}`
  // An empty map is a level-0 root (truncating the last entry away makes it one again).
  if (x.rootLevel > 0 && x.rootCount === 0) return `rootLevel ${x.rootLevel} over no root entries`
  // No block at or past the size is mapped (truncation cuts the map; growth writes in it).
  const blocks = Math.ceil(x.size / 2 ** x.dataShift)
  if (x.rootCount > 0 && x.rootKeys[x.rootCount - 1]! >= blocks) {
    return `root key ${x.rootCount - 1} (${x.rootKeys[x.rootCount - 1]}) is at or past the last block (${blocks} blocks of size ${x.size})`
  }
  if (!isUint(x.ctimeMs, Number.MAX_SAFE_INTEGER)) return `ctimeMs ${x.ctimeMs} is not in 0..2^53-1`
  if (!isUint(x.mtimeMs, Number.MAX_SAFE_INTEGER)) return `mtimeMs ${x.mtimeMs} is not in 0..2^53-1`
  const bounds = { maxCno: x.cno, allowZero: x.rootLevel === 0 }
  for (let i = 0; i < ROOT_ENTRIES; i++) {
    const key = x.rootKeys[i]!
    const hi = x.rootPtrHi[i]!
    const lo = x.rootPtrLo[i]!
    if (i >= x.rootCount) {
      if (key !== 0 || hi !== 0 || lo !== 0) return `unused root entry ${i} is not zero`
      continue
    }
    if (i > 0 && key <= x.rootKeys[i - 1]!) return `root key ${i} (${key}) is not above root key ${i - 1}`
    const problem = pointerProblem(hi, lo, bounds)
    if (problem !== undefined) return `root entry ${i} (key ${key}): ${problem}`
  }
  return undefined
}

export function encodeInode(into: Uint8Array, offset: number, x: Inode): void {
  const problem = inodeProblem(x)
  if (problem !== undefined) throw StreamSegmentError.invalidArgument(`inode: ${problem}`)
  into.fill(0, offset, offset + INODE_BYTES)
  const v = dataView(into)
  writeU64(v, offset + I_SIZE, x.size)
  v.setUint32(offset + I_CNO, x.cno, true)
  v.setUint8(offset + I_FORMAT, x.format)
  v.setUint8(offset + I_DATA_SHIFT, x.dataShift)
  v.setUint8(offset + I_META_SHIFT, x.metaShift)
  v.setUint8(offset + I_ROOT_LEVEL, x.rootLevel)
  v.setUint16(offset + I_ROOT_COUNT, x.rootCount, true)
  writeU64(v, offset + I_CTIME, x.ctimeMs)
  writeU64(v, offset + I_MTIME, x.mtimeMs)
  for (let i = 0; i < ROOT_ENTRIES; i++) {
    const at = offset + I_ROOT + i * ROOT_ENTRY_BYTES
    v.setUint32(at, x.rootKeys[i]!, true)
    v.setUint32(at + 4, x.rootPtrLo[i]!, true)
    v.setUint32(at + 8, x.rootPtrHi[i]!, true)
  }
}

/** Decodes and checks the 96 bytes at `offset` (the caller has checked they exist). */
export function decodeInode(bytes: Uint8Array, offset: number, where: string): Inode {
  const v = dataView(bytes)
  const reserved = firstNonZero(bytes, offset + I_RESERVED_A, offset + I_CTIME)
  const reservedB = firstNonZero(bytes, offset + I_RESERVED_B, offset + INODE_BYTES)
  if (reserved >= 0 || reservedB >= 0) {
    throw StreamSegmentError.corrupt(`${where}: reserved byte ${Math.max(reserved, reservedB) - offset} is not zero`)
  }
  const x: Inode = {
    size: readU64(v, offset + I_SIZE),
    cno: v.getUint32(offset + I_CNO, true),
    format: v.getUint8(offset + I_FORMAT),
    dataShift: v.getUint8(offset + I_DATA_SHIFT),
    metaShift: v.getUint8(offset + I_META_SHIFT),
    rootLevel: v.getUint8(offset + I_ROOT_LEVEL),
    rootCount: v.getUint16(offset + I_ROOT_COUNT, true),
    ctimeMs: readU64(v, offset + I_CTIME),
    mtimeMs: readU64(v, offset + I_MTIME),
    rootKeys: new Uint32Array(ROOT_ENTRIES),
    rootPtrHi: new Uint32Array(ROOT_ENTRIES),
    rootPtrLo: new Uint32Array(ROOT_ENTRIES),
  }
  for (let i = 0; i < ROOT_ENTRIES; i++) {
    const at = offset + I_ROOT + i * ROOT_ENTRY_BYTES
    x.rootKeys[i] = v.getUint32(at, true)
    x.rootPtrLo[i] = v.getUint32(at + 4, true)
    x.rootPtrHi[i] = v.getUint32(at + 8, true)
  }
  const problem = inodeProblem(x)
  if (problem !== undefined) throw StreamSegmentError.corrupt(`${where}: ${problem}`)
  return x
}

// ---- the `inode` object ----

export const INODE_OBJECT_BYTES = 128
export const INODE_OBJECT_MAGIC = 'SSEGINOD'
const O_VERSION = 8
const O_FLAGS = 10
const O_RESERVED_A = 12 // bytes 12..16
const O_INODE = 16
const O_RESERVED_B = O_INODE + INODE_BYTES // bytes 112..124
const O_CRC = 124
const MAGIC_INODE = new TextEncoder().encode(INODE_OBJECT_MAGIC)

/**
 * Encodes an inode with cno 0 too (a new container's base inode), which the decoder
 * refuses; nothing publishes cno 0.
 */
export function encodeInodeObject(x: Inode): Uint8Array {
  if (isNullInode(x)) throw StreamSegmentError.invalidArgument('inode object: the NULL inode cannot be published')
  const out = new Uint8Array(INODE_OBJECT_BYTES)
  const v = dataView(out)
  out.set(MAGIC_INODE, 0)
  v.setUint16(O_VERSION, LAYOUT_VERSION, true)
  encodeInode(out, O_INODE, x)
  v.setUint32(O_CRC, crc32(out.subarray(0, O_CRC)), true)
  return out
}

export function decodeInodeObject(bytes: Uint8Array): Inode {
  const where = 'inode object'
  if (bytes.length !== INODE_OBJECT_BYTES) {
    throw StreamSegmentError.corrupt(`${where}: ${bytes.length} bytes, expected ${INODE_OBJECT_BYTES}`)
  }
  for (let i = 0; i < MAGIC_INODE.length; i++) {
    if (bytes[i] !== MAGIC_INODE[i]) {
      throw StreamSegmentError.corrupt(`${where}: bad magic ${JSON.stringify(latin1(bytes.subarray(0, 8)))}`)
    }
  }
  const v = dataView(bytes)
  const version = v.getUint16(O_VERSION, true)
  if (version > LAYOUT_VERSION) {
    throw StreamSegmentError.unsupported(`${where}: layout version ${version}, this build reads ${LAYOUT_VERSION}`)
  }
  if (version === 0) throw StreamSegmentError.corrupt(`${where}: layout version 0`)
  const stored = v.getUint32(O_CRC, true)
  const computed = crc32(bytes.subarray(0, O_CRC))
  if (stored !== computed) {
    throw StreamSegmentError.corrupt(`${where}: CRC ${hex32(stored)} stored, ${hex32(computed)} computed`)
  }
  const flags = v.getUint16(O_FLAGS, true)
  if (flags !== 0) throw StreamSegmentError.corrupt(`${where}: flags 0x${flags.toString(16)}, expected 0`)
  const reserved = Math.max(firstNonZero(bytes, O_RESERVED_A, O_INODE), firstNonZero(bytes, O_RESERVED_B, O_CRC))
  if (reserved >= 0) throw StreamSegmentError.corrupt(`${where}: reserved byte ${reserved} is not zero`)
  const x = decodeInode(bytes, O_INODE, where)
  if (isNullInode(x)) throw StreamSegmentError.corrupt(`${where}: holds the NULL inode`)
  // No writer publishes cno 0; taken as published, it would leave gc nothing to keep.
  if (x.cno === 0) throw StreamSegmentError.corrupt(`${where}: cno 0, but checkpoints are numbered from 1`)
  return x
}

/** Bytes as Latin-1 text, for messages about magics. */
export function latin1(bytes: Uint8Array): string {
  return String.fromCharCode(...bytes)
}
