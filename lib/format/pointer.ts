/**
 * Block pointers, and the little-endian integer helpers every layout in `format/` uses.
 *
 * ```text
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |  lo (u32 LE): unit = lo & 0x3ffff (bits 0..17)                |  +0
 * |               part = lo >>> 18     (bits 18..31)               |
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |  hi (u32 LE): cno, 1..2^30-1; bits 30..31 zero                 |  +4
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * ```
 *
 * A pointer names (cno, part, unit): object `<cno>.<part>`, byte offset `unit × 4096`.
 * In memory it is two u32 numbers, `hi` and `lo` (no BigInt, no object per pointer).
 * Sentinels have hi = 0: ZERO (lo = 0) is a hole that reads as zeros; DIRTY (lo = 1) is a
 * block not placed yet and must never reach storage. Any other hi = 0 value is corrupt.
 */
import { StreamSegmentError } from '../errors.js'

export const POINTER_BYTES = 8
export const UNIT_SHIFT = 12
export const UNIT_BYTES = 4096
export const PART_SHIFT = 18
export const MAX_CNO = 0x3fffffff
export const MAX_PART = 0x3fff
export const MAX_UNIT = 0x3ffff
export const ZERO_LO = 0
export const DIRTY_LO = 1

/** The `lo` half of a pointer to `unit` in part `part` (unsigned: part << 18 overflows int32). */
export function pointerLo(part: number, unit: number): number {
  return ((part << PART_SHIFT) | unit) >>> 0
}
export function pointerPart(lo: number): number {
  return lo >>> PART_SHIFT
}
export function pointerUnit(lo: number): number {
  return lo & MAX_UNIT
}
export function isZeroPointer(hi: number, lo: number): boolean {
  return hi === 0 && lo === ZERO_LO
}
export function isDirtyPointer(hi: number, lo: number): boolean {
  return hi === 0 && lo === DIRTY_LO
}

export interface PointerBounds {
  /** The newest checkpoint the pointer may name (the cno of whatever holds it). */
  maxCno: number
  /** Whether the ZERO sentinel is allowed here (data pointers: yes; node pointers: no). */
  allowZero: boolean
}

/** What is wrong with the pointer (hi, lo) as stored, or undefined when it is valid. */
export function pointerProblem(hi: number, lo: number, bounds: PointerBounds): string | undefined {
  if (!isUint(hi, 0xffffffff) || !isUint(lo, 0xffffffff)) return `pointer (${hi}, ${lo}) is not two u32`
  if (hi === 0) {
    if (lo === ZERO_LO) return bounds.allowZero ? undefined : 'ZERO pointer where a node pointer is required'
    if (lo === DIRTY_LO) return 'DIRTY (not placed) pointer on storage'
    return `pointer with cno 0 and lo 0x${lo.toString(16)} is neither ZERO nor DIRTY`
  }
  if (hi > MAX_CNO) return `pointer cno ${hi} exceeds ${MAX_CNO}`
  if (hi > bounds.maxCno) {
    return `pointer to ${hi}.${pointerPart(lo)} unit ${pointerUnit(lo)} is newer than cno ${bounds.maxCno}`
  }
  return undefined
}

/** Throws ERR_CORRUPT, prefixed by `where`, unless (hi, lo) is a valid stored pointer. */
export function checkPointer(hi: number, lo: number, where: string, bounds: PointerBounds): void {
  const problem = pointerProblem(hi, lo, bounds)
  if (problem !== undefined) throw StreamSegmentError.corrupt(`${where}: ${problem}`)
}

// ---- little-endian helpers shared by the layouts ----

/** A DataView over exactly `bytes` (which may be a subarray of a larger buffer). */
export function dataView(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

/** An integer in 0..max (rejects NaN, Infinity and fractions). */
export function isUint(x: number, max: number): boolean {
  return Number.isInteger(x) && x >= 0 && x <= max
}

/**
 * A u64 as a number: exact up to 2^53-1. Larger stored values come back ≥ 2^53 (rounded),
 * so `> Number.MAX_SAFE_INTEGER` is the test that rejects them.
 */
export function readU64(view: DataView, offset: number): number {
  return view.getUint32(offset, true) + view.getUint32(offset + 4, true) * 0x100000000
}

/** Writes 0..2^53-1 (the caller has checked it) as a u64. */
export function writeU64(view: DataView, offset: number, value: number): void {
  view.setUint32(offset, value % 0x100000000, true)
  view.setUint32(offset + 4, Math.floor(value / 0x100000000), true)
}

export function hex32(x: number): string {
  return `0x${(x >>> 0).toString(16).padStart(8, '0')}`
}

/** The first non-zero byte's index in bytes[start, end), or -1. */
export function firstNonZero(bytes: Uint8Array, start: number, end: number): number {
  for (let i = start; i < end; i++) if (bytes[i] !== 0) return i
  return -1
}
