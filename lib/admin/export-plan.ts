/**
 * The plan of an export: the checkpoint's extents (stored runs and holes, in file order,
 * from the block map's data pointers) and the parts of the object written from them,
 * copied server-side or sent, within S3's limits on parts.
 */
import { StreamSegmentError } from '../errors.js'
import { givenOr as or } from '../settings.js'
import { MAX_PART_BYTES } from '../store/common.js'
import type { ObjectStore } from '../store/types.js'
import { MiB } from '../util/units.js'
import type { Reached } from './map-walk.js'

/**
 * A stretch of the file: bytes [start, end) stored from byte `at` of `key`, or a hole (no
 * key). A stored one's blocks have their summary CRC-32s at `crcs[crc…]` of its checkpoint
 * (checkpointExtents), one per block, in order.
 */
export interface Extent {
  start: number
  end: number
  key?: string
  at: number
  crc?: number
}

export type PlannedPart =
  | { kind: 'copy'; start: number; end: number; key: string; at: number }
  | { kind: 'send'; start: number; end: number }

const MAX_PARTS = 10_000
const DEFAULT_MIN_PART = 5 * MiB

/**
 * The part sizes of an export into a store whose smallest part is `destMin` (undefined:
 * none, as for a file): the smallest part but the last (default and least: `destMin`,
 * else 5 MiB), the largest sent and the largest copied (at least twice the smallest, at
 * most 5 GiB); ERR_INVALID_ARGUMENT naming a bad one.
 */
export function partSizes(
  destMin: ObjectStore['minPartBytes'],
  options: { minPartBytes?: number; sendPartBytes?: number; copyPartBytes?: number },
): { minPartBytes: number; sendPartBytes: number; copyPartBytes: number } {
  const least = destMin ?? 1
  const minPartBytes = or(options.minPartBytes, destMin ?? DEFAULT_MIN_PART)
  if (!Number.isSafeInteger(minPartBytes) || minPartBytes < least) {
    throw StreamSegmentError.invalidArgument(
      `exportObject: minPartBytes must be an integer ≥ ${least}, got ${minPartBytes}`,
    )
  }
  const sendPartBytes = or(options.sendPartBytes, Math.max(16 * MiB, 2 * minPartBytes))
  const copyPartBytes = or(options.copyPartBytes, Math.max(256 * MiB, 2 * minPartBytes))
  for (const [name, v] of [
    ['sendPartBytes', sendPartBytes],
    ['copyPartBytes', copyPartBytes],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 2 * minPartBytes || v > MAX_PART_BYTES) {
      throw StreamSegmentError.invalidArgument(
        `exportObject: ${name} must be an integer in [${2 * minPartBytes}, ${MAX_PART_BYTES}] (2 × minPartBytes .. 5 GiB), got ${v}`,
      )
    }
  }
  return { minPartBytes, sendPartBytes, copyPartBytes }
}

/**
 * The file's extents in order, from the block map's data pointers (per object: byte
 * offsets and block indexes): blocks stored back to back in one object make one extent,
 * unmapped blocks holes; the last block is cut at the file's size. From `crcOf` (per
 * object, the summary CRC-32 of each data pointer's slot, in the pointers' order), `crcs`
 * holds the stored blocks' CRCs in file order, and each stored extent's `crc` indexes its
 * first: 4 bytes per block, where the walk's pointers take 8.
 */
export function checkpointExtents(
  reached: ReadonlyMap<string, Pick<Reached, 'dataAt' | 'dataBlock'>>,
  size: number,
  blockSize: number,
  crcOf: ReadonlyMap<string, Uint32Array>,
): { extents: Extent[]; crcs: Uint32Array } {
  const keys: string[] = []
  let n = 0
  for (const [key, r] of reached) {
    keys.push(key)
    n += r.dataBlock.length
  }
  const block = new Float64Array(n)
  const obj = new Uint32Array(n)
  const at = new Float64Array(n)
  const crc = new Uint32Array(n)
  let i = 0
  keys.forEach((key, k) => {
    const r = reached.get(key) as Pick<Reached, 'dataAt' | 'dataBlock'>
    const c = crcOf.get(key)
    for (let j = 0; j < r.dataBlock.length; j++, i++) {
      block[i] = r.dataBlock.get(j)
      at[i] = r.dataAt.get(j)
      obj[i] = k
      crc[i] = c?.[j] as number
    }
  })
  const order = new Uint32Array(n)
  for (let j = 0; j < n; j++) order[j] = j
  order.sort((a, b) => (block[a] as number) - (block[b] as number))
  const crcs = new Uint32Array(n)
  const out: Extent[] = []
  let pos = 0
  let cur: Extent | undefined
  let curObj = -1
  for (let j = 0; j < n; j++) {
    const x = order[j] as number
    crcs[j] = crc[x] as number
    const start = (block[x] as number) * blockSize
    if (start >= size) break
    const end = Math.min(start + blockSize, size)
    const o = obj[x] as number
    const a = at[x] as number
    // Merged blocks are the next in file order, so an extent's CRCs are consecutive from `crc`.
    if (cur !== undefined && start === cur.end && o === curObj && a === cur.at + (cur.end - cur.start)) {
      cur.end = end
      pos = end
      continue
    }
    if (start > pos) out.push({ start: pos, end: start, at: 0 })
    cur = { start, end, key: keys[o] as string, at: a, crc: j }
    curObj = o
    out.push(cur)
    pos = end
  }
  if (pos < size) out.push({ start: pos, end: size, at: 0 })
  return { extents: out, crcs }
}

/**
 * The parts of the exported object, in file order: runs of at least `minPartBytes` copied
 * (when `copy`), the rest sent, every part but the last at least `minPartBytes`; sizes
 * double until the parts number at most 10,000. No part for an empty file. A plan is
 * given up as soon as it passes 10,000 parts: a file of up to 2^53 bytes, mostly a hole,
 * must not make hundreds of millions of them first.
 */
export function planParts(
  extents: readonly Extent[],
  size: number,
  o: { minPartBytes: number; sendPartBytes: number; copyPartBytes: number; copy: boolean },
): PlannedPart[] {
  for (let scale = 1; ; scale *= 2) {
    const min = o.minPartBytes * scale
    const plan = planOnce(extents, size, {
      min,
      send: Math.min(o.sendPartBytes * scale, MAX_PART_BYTES),
      copyMax: Math.min(o.copyPartBytes * scale, MAX_PART_BYTES),
      copy: o.copy,
    })
    if (plan !== undefined) return plan
    if (min > MAX_PART_BYTES / 2) {
      throw StreamSegmentError.invalidArgument(`exportObject: ${size} bytes do not fit in ${MAX_PARTS} parts`)
    }
  }
}

/** planParts at one scale: the parts, or undefined once they would be more than MAX_PARTS. */
function planOnce(
  extents: readonly Extent[],
  size: number,
  o: { min: number; send: number; copyMax: number; copy: boolean },
): PlannedPart[] | undefined {
  const parts: PlannedPart[] = []
  let tooMany = false
  // Even pieces: n = ⌈len / max⌉ pieces of ⌊len / n⌋ bytes, the first (len mod n) one byte
  // longer. Each is at least `min`, since len / n > max / 2 ≥ min when n ≥ 2 (pieces of
  // ⌈len / n⌉ left the last up to n − 1 bytes short).
  const split = (start: number, end: number, max: number, emit: (s: number, e: number) => void) => {
    const len = end - start
    const n = Math.ceil(len / max)
    if (parts.length + n > MAX_PARTS) {
      tooMany = true
      return
    }
    const piece = Math.floor(len / n)
    const longer = len - piece * n
    for (let i = 0, s = start; i < n; i++) {
      const e = s + piece + (i < longer ? 1 : 0)
      emit(s, e)
      s = e
    }
  }
  const send = (start: number, end: number) =>
    split(start, end, o.send, (s, e) => parts.push({ kind: 'send', start: s, end: e }))
  let sendStart = -1
  for (let i = 0; i < extents.length && !tooMany; i++) {
    const x = extents[i] as Extent
    const key = x.key
    if (!o.copy || key === undefined || x.end - x.start < o.min) {
      if (sendStart < 0) sendStart = x.start
      continue
    }
    let from = x.start
    if (sendStart >= 0) {
      const need = o.min - (x.start - sendStart)
      if (need > 0) {
        // The bytes sent before this run are too few for a part: they borrow its head.
        const rest = x.end - x.start - need
        if (!(rest >= o.min || (i === extents.length - 1 && rest > 0))) continue // all of it is sent
        from = x.start + need
      }
      send(sendStart, from)
      sendStart = -1
    }
    const at = x.at + (from - x.start)
    split(from, x.end, o.copyMax, (s, e) => parts.push({ kind: 'copy', start: s, end: e, key, at: at + (s - from) }))
  }
  if (sendStart >= 0 && sendStart < size) send(sendStart, size)
  return tooMany ? undefined : parts
}
