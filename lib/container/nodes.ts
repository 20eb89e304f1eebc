/**
 * Block-map nodes read from their objects: one node, or a span of neighbouring meta
 * blocks in one ranged GET.
 *
 * - A node is always checked against what its parent says of it (decodeNode: CRC, level,
 *   the checkpoint that wrote it, its key range) before anyone uses it.
 * - A node read alone (readNode) must lie in its object's meta blocks, as its header
 *   places them (MetaRegions): a data block whose bytes decode as a node (a file's own
 *   content may) is not one.
 * - A span is at most NODE_SPAN_BYTES: `nodeSpans` covers every needed node of one object
 *   and widens each span over unneeded siblings while it stays under that cap, so a cold
 *   walk fetches each object's index nodes once.
 */
import { mayBeDamagedOnTheWay, StreamSegmentError } from '../errors.js'
import { type ObjectLayout, objectLayout } from '../format/header.js'
import { segmentKey } from '../format/names.js'
import { type BlockMapNode, decodeNode, type NodeExpectation } from '../format/node.js'
import { nodeOffsetProblem } from '../format/object.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
import type { ObjectStore } from '../store/types.js'
import { printable } from '../util/shell-words.js'
import { MiB } from '../util/units.js'
import { readObjectHeader } from './object-header.js'

/** Largest span of meta blocks one node GET brings. */
export const NODE_SPAN_BYTES = 1 * MiB

/** Where a node pointer (hi, lo) points: the object's key and the byte offset in it. */
export function nodeLocation(hi: number, lo: number): { key: string; offset: number } {
  return { key: segmentKey(hi, pointerPart(lo)), offset: pointerUnit(lo) * UNIT_BYTES }
}

/**
 * Where the meta blocks of the objects whose nodes were read lie, from their headers: one
 * header read per object, kept (the oldest of more than `max` objects go and are read
 * again when needed; a failed read is not kept).
 */
export class MetaRegions {
  private readonly layouts = new Map<string, Promise<ObjectLayout>>()

  constructor(
    private readonly store: ObjectStore,
    private readonly format: number,
    private readonly max = 4096,
  ) {}

  /** The layout of object `<cno>.<part>`, from its header; errors name the store and the key. */
  layoutOf(cno: number, part: number, signal?: AbortSignal): Promise<ObjectLayout> {
    const key = segmentKey(cno, part)
    const known = this.layouts.get(key)
    if (known !== undefined) return known
    const { store } = this
    const p = readObjectHeader(store, cno, part, { format: this.format, signal }).then(
      ({ header }) => objectLayout(header, header),
      (err: unknown) => {
        this.layouts.delete(key)
        // decodeHeader names the key alone: the store too, as the node's own errors do (their
        // messages made printable, errors.ts: the URL as they quote it).
        if (!mayBeDamagedOnTheWay(err) || err.message.startsWith(`${printable(store.url)}/`)) throw err
        throw new StreamSegmentError(err.code, `${store.url}/${err.message}`, { cause: err })
      },
    )
    this.layouts.set(key, p)
    if (this.layouts.size > this.max) this.layouts.delete(this.layouts.keys().next().value as string)
    return p
  }
}

/**
 * Reads the node that pointer (hi, lo) names, checked against `expect` (its cno is `hi`)
 * and against its object's header (`regions`): a pointer at anything but one of the
 * object's meta blocks is ERR_CORRUPT, whatever the bytes there decode as.
 * A pointer past its object's end is ERR_CORRUPT and a missing object ERR_NOT_FOUND,
 * both saying a node points there (the store's own errors name neither the pointer nor
 * the map, and its ERR_RANGE is no sign of damage). A node that fails its checks is read
 * once more before it is reported, as the reader's walk reads a span again: bytes damaged
 * on the way (a flipped bit) fail them as bytes damaged on storage do.
 */
export async function readNode(
  store: ObjectStore,
  regions: MetaRegions,
  hi: number,
  lo: number,
  metaBlockSize: number,
  expect: Omit<NodeExpectation, 'cno' | 'where'>,
  signal?: AbortSignal,
): Promise<BlockMapNode> {
  const { key, offset } = nodeLocation(hi, lo)
  const where = `${store.url}/${key} meta block at ${offset}`
  // Beside the node's own GET (no more latency); awaited after it, whose errors say more.
  const layout = regions.layoutOf(hi, pointerPart(lo), signal)
  layout.catch(() => {})
  const fetch = async (): Promise<Uint8Array> => {
    try {
      return await store.get(key, { range: { start: offset, end: offset + metaBlockSize }, signal })
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_RANGE')) {
        throw StreamSegmentError.corrupt(`${where}: a block-map node points there, past the object's end`, err)
      }
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
        throw StreamSegmentError.notFound(`${where}: no such object, but a block-map node points into it`, err)
      }
      throw err
    }
  }
  const checks = { ...expect, cno: hi, where }
  const bytes = await fetch()
  const problem = nodeOffsetProblem(await layout, offset)
  if (problem !== undefined) throw StreamSegmentError.corrupt(`${store.url}/${key}: ${problem}`)
  try {
    return decodeNode(bytes, checks)
  } catch (err) {
    // Only a node that failed its checks is read again: a pointer past the end stays so.
    if (!StreamSegmentError.is(err, 'ERR_CORRUPT')) throw err
    return decodeNode(await fetch(), checks)
  }
}

/**
 * The bytes of [start, end) of object `key`, for a span of nodes. A span starting past the
 * object's end is ERR_CORRUPT (a pointer names bytes the object does not have); a short
 * answer is returned as it is, and each node in it checks its own bounds.
 */
export async function readNodeSpan(
  store: ObjectStore,
  key: string,
  span: { start: number; end: number },
  signal?: AbortSignal,
): Promise<Uint8Array> {
  try {
    return await store.get(key, { range: { start: span.start, end: span.end }, signal })
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_RANGE')) {
      throw StreamSegmentError.corrupt(
        `${store.url}/${key}: nodes are pointed at from byte ${span.start}, past the object's end`,
        err,
      )
    }
    throw err
  }
}

export interface NodeSpan<T> {
  start: number
  end: number
  refs: T[]
}

/**
 * Cuts the refs of one object into spans of at most `cap` bytes that cover every needed
 * node, then widens each span over unneeded siblings (rightwards first: reads go forward)
 * while it stays under `cap` and clear of its neighbours. Each step looks only at the refs
 * near its span (found by binary search): a hostile map may point into one object from a
 * million entries, in thousands of spans.
 */
export function nodeSpans<T extends { offset: number; needed: boolean }>(
  refs: readonly T[],
  mbs: number,
  cap: number,
): NodeSpan<T>[] {
  const sorted = [...refs].sort((a, b) => a.offset - b.offset)
  const spans: NodeSpan<T>[] = []
  for (const r of sorted) {
    if (!r.needed) continue
    const last = spans[spans.length - 1]
    if (last !== undefined && r.offset + mbs - last.start <= cap) last.end = Math.max(last.end, r.offset + mbs)
    else spans.push({ start: r.offset, end: r.offset + mbs, refs: [] })
  }
  /** The index of the first ref at or past `offset`. */
  const firstAt = (offset: number) => {
    let lo = 0
    let hi = sorted.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if ((sorted[mid] as T).offset < offset) lo = mid + 1
      else hi = mid
    }
    return lo
  }
  for (let j = 0; j < spans.length; j++) {
    const s = spans[j] as NodeSpan<T>
    const lowest = j > 0 ? (spans[j - 1] as NodeSpan<T>).end : 0
    const highest = j + 1 < spans.length ? (spans[j + 1] as NodeSpan<T>).start : Number.POSITIVE_INFINITY
    // Rightwards: the refs from the span's end on, while they fit (past one, none further does).
    for (let k = firstAt(s.end); k < sorted.length; k++) {
      const r = sorted[k] as T
      if (r.offset + mbs > highest || r.offset + mbs - s.start > cap) break
      if (r.offset >= s.end) s.end = r.offset + mbs
    }
    // Leftwards: the refs below the span's start, down while they fit.
    for (let k = firstAt(s.start) - 1; k >= 0; k--) {
      const r = sorted[k] as T
      if (r.offset < lowest || s.end - r.offset > cap) break
      if (r.offset < s.start) s.start = r.offset
    }
  }
  // The spans are in order and apart: each ref goes to the one holding it, if any.
  let at = 0
  for (const r of sorted) {
    while (at < spans.length && (spans[at] as NodeSpan<T>).end < r.offset + mbs) at++
    const s = spans[at]
    if (s !== undefined && r.offset >= s.start) s.refs.push(r)
  }
  return spans
}
