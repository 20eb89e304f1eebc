/**
 * Object keys, relative to the container:
 *
 * ```text
 *   inode            the commit point (inode.ts)
 *   0000000007.0     checkpoint 7, part 0: `<cno, 10 digits, zero-padded>.<part, decimal, no padding>`
 *   0000000007.12    checkpoint 7, part 12
 * ```
 *
 * cno is 1..MAX_CNO and part 0..MAX_PART, as in a block pointer. Every other key
 * (`0000000001.01`, `1.0`, `0000000000.0`, `0000000001.16384`, `inode.bak`, ...) is not
 * ours: `parseKey` returns undefined, readers ignore it and the cleaner never deletes it.
 * `parseKey(segmentKey(c, p))` is `{ kind: 'segment', cno: c, part: p }` for every valid pair.
 */
import { StreamSegmentError } from '../errors.js'
import { isUint, MAX_CNO, MAX_PART } from './pointer.js'

export const INODE_KEY = 'inode'

export type ParsedKey = { kind: 'segment'; cno: number; part: number } | { kind: 'inode' }

const SEGMENT_KEY = /^(\d{10})\.(0|[1-9]\d{0,4})$/

export function segmentKey(cno: number, part: number): string {
  if (!isUint(cno, MAX_CNO) || cno === 0 || !isUint(part, MAX_PART)) {
    throw StreamSegmentError.invalidArgument(`no segment key for cno ${cno}, part ${part}`)
  }
  return `${String(cno).padStart(10, '0')}.${part}`
}

/** What every key of checkpoint `cno` starts with: `<cno>.` (a list of it finds the checkpoint's parts). */
export function checkpointPrefix(cno: number): string {
  return segmentKey(cno, 0).slice(0, -1)
}

export function parseKey(key: string): ParsedKey | undefined {
  if (key === INODE_KEY) return { kind: 'inode' }
  const m = SEGMENT_KEY.exec(key)
  if (m === null) return undefined
  const cno = Number(m[1])
  const part = Number(m[2])
  if (cno === 0 || cno > MAX_CNO || part > MAX_PART) return undefined
  return { kind: 'segment', cno, part }
}
