/**
 * Bytes of part 0 that an open by checkpoint number reads with its header, for the
 * file's readers: how many (part0OpenBytes), and what a reader's GET may take of them
 * (answerFrom: exactly what the store would answer, or nothing). container/objects.ts
 * hands them to the first read of that object.
 */
import { HEADER_BYTES, SUMMARY_ENTRY_BYTES } from '../format/header.js'
import { UNIT_BYTES } from '../format/pointer.js'
import { KiB } from '../util/units.js'

/** How far below part 0's index nodes a read's first walk reads, for the leaves part 0 holds. */
export const PART0_LEAVES_BYTES = 256 * KiB

/**
 * How many bytes of part 0's end (head first, its start) an open by checkpoint number
 * reads with its header, the object being `size` bytes: as many as a reader's first read
 * of it takes. Tail first that is the index nodes under the root (the last meta blocks:
 * a map is written bottom up; room for 64 KiB of them), PART0_LEAVES_BYTES of leaves below
 * them, and above them its summary (16 bytes per 4 KiB unit of the object at most) and
 * header; head first, header, summary and the meta blocks after them.
 */
export function part0OpenBytes(size: number): number {
  return PART0_LEAVES_BYTES + 64 * KiB + SUMMARY_ENTRY_BYTES * Math.ceil(size / UNIT_BYTES) + HEADER_BYTES
}

/**
 * Bytes of an object read before a reader asked for them: `bytes` from offset `start` of
 * an object of `size` bytes (a suffix or a prefix of it, or all of it).
 */
export interface OpenedBytes {
  key: string
  start: number
  bytes: Uint8Array
  size: number
}

/** Whether `o` runs to its object's end. */
export function reachesEnd(o: OpenedBytes): boolean {
  return o.start + o.bytes.byteLength === o.size
}

/**
 * What a GET of `range` would answer, from the bytes `o` holds, when they hold all of it:
 * up to the object's end, not past it (undefined otherwise, and for a range past the end,
 * which the store answers with its error).
 */
export function answerFrom(
  o: OpenedBytes,
  range: { start: number; end: number } | { suffix: number },
): Uint8Array | undefined {
  const end = o.start + o.bytes.byteLength
  if ('suffix' in range) {
    if (end !== o.size || (o.start > 0 && range.suffix > o.bytes.byteLength)) return undefined
    return o.bytes.subarray(Math.max(0, o.bytes.byteLength - range.suffix))
  }
  const to = Math.min(range.end, o.size)
  if (range.start < o.start || range.start >= o.size || to > end) return undefined
  return o.bytes.subarray(range.start - o.start, to - o.start)
}
