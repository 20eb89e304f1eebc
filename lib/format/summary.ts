/**
 * The summary: one 16-byte entry per data slot of an object, in slot order, between the
 * meta blocks and the header. The header holds its count (= dataCount) and its CRC.
 *
 * ```text
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |            blockIndex (u32): the file block in this slot      |  0
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |            flags (u32): bit0 LIVE; other bits zero            |  4
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |            crc (u32): CRC-32 of the slot's dataBlockSize bytes |  8
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |            reserved (u32) = 0                                  | 12
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * ```
 *
 * A dead slot (LIVE clear) holds a block written again after it was placed; its bytes and
 * CRC are still those that were sent, so a verifier can check every slot. In memory the
 * summary is three typed arrays indexed by slot, never an object per entry.
 */

import { StreamSegmentError } from '../errors.js'
import { crc32 } from '../util/crc32.js'
import { SUMMARY_ENTRY_BYTES } from './header.js'
import { dataView, hex32 } from './pointer.js'

export const SUMMARY_LIVE = 1

export interface Summary {
  count: number
  /** Each array holds at least `count` entries. */
  blockIndex: Uint32Array
  /** 1 live, 0 dead. */
  live: Uint8Array
  crc: Uint32Array
}

export function emptySummary(count: number): Summary {
  return { count, blockIndex: new Uint32Array(count), live: new Uint8Array(count), crc: new Uint32Array(count) }
}

/** Writes `count × 16` bytes at `offset` in `into`; returns their CRC-32 (the header's summaryCrc). */
export function encodeSummary(into: Uint8Array, s: Summary, offset = 0): number {
  const n = s.count
  if (!(Number.isInteger(n) && n >= 0 && s.blockIndex.length >= n && s.live.length >= n && s.crc.length >= n)) {
    throw StreamSegmentError.invalidArgument(`summary: count ${n} does not fit its arrays`)
  }
  const out = into.subarray(offset, offset + n * SUMMARY_ENTRY_BYTES)
  if (out.length !== n * SUMMARY_ENTRY_BYTES) {
    throw StreamSegmentError.invalidArgument(`summary: no room for ${n} entries at ${offset} in ${into.length} bytes`)
  }
  const v = dataView(out)
  for (let i = 0; i < n; i++) {
    const live = s.live[i]!
    if (live > 1) throw StreamSegmentError.invalidArgument(`summary: slot ${i} live is ${live}, not 0 or 1`)
    const at = i * SUMMARY_ENTRY_BYTES
    v.setUint32(at, s.blockIndex[i]!, true)
    v.setUint32(at + 4, live, true)
    v.setUint32(at + 8, s.crc[i]!, true)
    v.setUint32(at + 12, 0, true)
  }
  return crc32(out)
}

/**
 * Decodes `bytes` (exactly the summary region) against the header's `count` and
 * `summaryCrc`: length, CRC, then each entry's flags and reserved field.
 */
export function decodeSummary(
  bytes: Uint8Array,
  expected: { count: number; summaryCrc: number; where: string },
): Summary {
  const { count, where } = expected
  if (bytes.length !== count * SUMMARY_ENTRY_BYTES) {
    throw StreamSegmentError.corrupt(
      `${where}: summary is ${bytes.length} bytes, ${count} entries need ${count * SUMMARY_ENTRY_BYTES}`,
    )
  }
  const computed = crc32(bytes)
  if (computed !== expected.summaryCrc) {
    throw StreamSegmentError.corrupt(
      `${where}: summary CRC ${hex32(computed)} computed, header says ${hex32(expected.summaryCrc)}`,
    )
  }
  const s = emptySummary(count)
  const v = dataView(bytes)
  for (let i = 0; i < count; i++) {
    const at = i * SUMMARY_ENTRY_BYTES
    const flags = v.getUint32(at + 4, true)
    if ((flags & ~SUMMARY_LIVE) !== 0) {
      throw StreamSegmentError.corrupt(`${where}: summary entry ${i} has unknown flags ${hex32(flags)}`)
    }
    const reserved = v.getUint32(at + 12, true)
    if (reserved !== 0) throw StreamSegmentError.corrupt(`${where}: summary entry ${i} reserved is ${hex32(reserved)}`)
    s.blockIndex[i] = v.getUint32(at, true)
    s.live[i] = flags
    s.crc[i] = v.getUint32(at + 8, true)
  }
  return s
}
