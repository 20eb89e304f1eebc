/**
 * Whole segment objects, in memory, in either format (header.ts):
 *
 * ```text
 * StreamSegment: [n × data][m × meta][n × 16 summary][256 header]
 * PartedSegment: [256 header][n × 16 summary][zeros to 4 KiB][m × meta][n × data]
 * ```
 *
 * `encodeObjectTail` gives a StreamSegment writer the bytes after its meta blocks
 * (summary + header), `encodeObjectHead` a PartedSegment writer those before them
 * (header, summary, padding), both computing summaryCrc; `encodeObject` builds a whole
 * object (fixtures, tests, small objects). `decodeObject` is the full check a verifier
 * runs, in this order: the header (header.ts, against the key's cno and part; the
 * format detected as a reader that does not know it does: the end first, then the
 * start), the summary, the padding, every meta block as a node
 * written by this checkpoint, every data slot's CRC (dead slots too), then the pointers
 * that land in this same object: a leaf's (or a level-0 root's) must name a data slot
 * holding that very block, an index node's (or a root's) must name a meta block holding a
 * node one level down whose keys lie under the parent's key range. Every failure is
 * ERR_CORRUPT (ERR_UNSUPPORTED for a newer version); a key that is not a segment key is
 * ERR_INVALID_ARGUMENT.
 */

import { StreamSegmentError } from '../errors.js'
import { crc32Chunks } from '../util/crc32.js'
import {
  detectedHeader,
  encodeHeader,
  HEADER_BYTES,
  type Header,
  type ObjectLayout,
  objectLayout,
  SUMMARY_ENTRY_BYTES,
  streamHeaderOrWhy,
} from './header.js'
import { FORMAT_PARTED } from './inode.js'
import { parseKey } from './names.js'
import { type BlockMapNode, decodeNode, encodeNode } from './node.js'
import { firstNonZero, hex32, pointerPart, pointerUnit, UNIT_BYTES } from './pointer.js'
import { decodeSummary, encodeSummary, type Summary } from './summary.js'

/** Header fields a writer gives; dataCount is summary.count and summaryCrc is computed. */
export type TailFields = Omit<Header, 'dataCount' | 'summaryCrc'>
/** As TailFields, and metaCount is the number of nodes given. */
export type ObjectFields = Omit<Header, 'dataCount' | 'metaCount' | 'summaryCrc'>

export interface SegmentObject {
  key: string
  header: Header
  layout: ObjectLayout
  summary: Summary
  nodes: BlockMapNode[]
  /** The data region; slot i is `dataSlot(obj, i)`. A view into the decoded bytes. */
  data: Uint8Array
}

/** The summary and header of a StreamSegment object with `summary.count` data slots: `n × 16 + 256` bytes. */
export function encodeObjectTail(fields: TailFields, summary: Summary): Uint8Array {
  const n = summary.count
  const out = new Uint8Array(n * SUMMARY_ENTRY_BYTES + HEADER_BYTES)
  const summaryCrc = encodeSummary(out, summary, 0)
  encodeHeader({ ...fields, dataCount: n, summaryCrc }, out, n * SUMMARY_ENTRY_BYTES)
  return out
}

/** The header, summary and padding of a PartedSegment object: its first `metaOffset` bytes. */
export function encodeObjectHead(fields: TailFields, summary: Summary): Uint8Array {
  const n = summary.count
  const layout = objectLayout({ dataCount: n, metaCount: fields.metaCount }, fields)
  const out = new Uint8Array(layout.metaOffset)
  const summaryCrc = encodeSummary(out, summary, layout.summaryOffset)
  encodeHeader({ ...fields, dataCount: n, summaryCrc }, out, 0)
  return out
}

/** A whole object: `data` holds exactly `summary.count` data blocks, `nodes` its meta blocks in order. */
export function encodeObject(
  fields: ObjectFields,
  data: Uint8Array,
  nodes: readonly BlockMapNode[],
  summary: Summary,
): Uint8Array {
  const layout = objectLayout({ dataCount: summary.count, metaCount: nodes.length }, fields)
  if (data.length !== layout.dataEnd - layout.dataOffset) {
    throw StreamSegmentError.invalidArgument(
      `object: ${data.length} data bytes for ${summary.count} blocks of ${layout.dataBlockSize}`,
    )
  }
  const out = new Uint8Array(layout.objectSize)
  out.set(data, layout.dataOffset)
  for (let j = 0; j < nodes.length; j++) {
    const at = layout.metaOffset + j * layout.metaBlockSize
    encodeNode(out.subarray(at, at + layout.metaBlockSize), nodes[j]!)
  }
  if (layout.format === FORMAT_PARTED) out.set(encodeObjectHead({ ...fields, metaCount: nodes.length }, summary), 0)
  else out.set(encodeObjectTail({ ...fields, metaCount: nodes.length }, summary), layout.summaryOffset)
  return out
}

export function dataSlot(obj: SegmentObject, i: number): Uint8Array {
  const size = obj.layout.dataBlockSize
  return obj.data.subarray(i * size, (i + 1) * size)
}

/** Decodes and checks the whole object `bytes`, stored under `key` (see the top comment). */
export function decodeObject(bytes: Uint8Array, key: string): SegmentObject {
  const parsed = parseKey(key)
  if (parsed?.kind !== 'segment')
    throw StreamSegmentError.invalidArgument(`${JSON.stringify(key)} is not a segment key`)
  const tail = bytes.subarray(Math.max(0, bytes.length - HEADER_BYTES))
  const stream = streamHeaderOrWhy(tail, bytes.length, parsed)
  const header =
    stream instanceof StreamSegmentError
      ? detectedHeader(bytes.subarray(0, HEADER_BYTES), tail, bytes.length, parsed, stream)
      : stream
  const layout = objectLayout(header, header)
  const summary = decodeSummary(bytes.subarray(layout.summaryOffset, layout.summaryEnd), {
    count: header.dataCount,
    summaryCrc: header.summaryCrc,
    where: key,
  })
  const pad = paddingNotZero(bytes, 0, layout)
  if (pad >= 0) throw StreamSegmentError.corrupt(`${key}: padding byte ${pad} is not zero`)
  const nodes = decodeMetaBlocks(bytes, 0, header, layout, (j) => `${key} meta block ${j}`)
  checkSlotCrcs(bytes.subarray(layout.dataOffset, layout.dataEnd), 0, summary, layout.dataBlockSize, (i, computed) => {
    throw StreamSegmentError.corrupt(slotCrcMessage(key, summary, i, computed))
  })
  const obj: SegmentObject = {
    key,
    header,
    layout,
    summary,
    nodes,
    data: bytes.subarray(layout.dataOffset, layout.dataEnd),
  }
  checkLocalPointers(obj)
  return obj
}

/** The pointers that land in this object must land on the right kind of block (top comment). */
function checkLocalPointers(obj: SegmentObject): void {
  const { inode } = obj.header
  const rootKeys = inode.rootKeys.subarray(0, inode.rootCount)
  checkEntries(obj, `${obj.key}: header inode root`, inode.rootLevel, rootKeys, inode.rootPtrHi, inode.rootPtrLo)
  for (let j = 0; j < obj.nodes.length; j++) {
    const n = obj.nodes[j]!
    checkEntries(obj, `${obj.key} meta block ${j}`, n.level, n.keys, n.ptrHi, n.ptrLo)
  }
}

/** Entries whose `level` says what they point at: 0 data blocks, L >= 1 nodes of level L-1. */
function checkEntries(
  obj: SegmentObject,
  where: string,
  level: number,
  keys: Uint32Array,
  ptrHi: Uint32Array,
  ptrLo: Uint32Array,
): void {
  const { header, layout, summary, nodes } = obj
  for (let e = 0; e < keys.length; e++) {
    const hi = ptrHi[e]!
    const lo = ptrLo[e]!
    if (hi !== header.cno || pointerPart(lo) !== header.part) continue
    const key = keys[e]!
    const offset = pointerUnit(lo) * UNIT_BYTES
    const fail = (msg: string) =>
      StreamSegmentError.corrupt(`${where}: entry ${e} (key ${key}) points at byte ${offset} of this object, ${msg}`)
    if (level === 0) {
      const slot = dataSlotAt(layout, offset)
      if (slot < 0) throw fail('not a data slot')
      if (summary.blockIndex[slot] !== key) throw fail(`slot ${slot}, which holds block ${summary.blockIndex[slot]}`)
      continue
    }
    const j = metaBlockAt(layout, offset)
    if (j < 0) throw fail('not a meta block')
    const child = nodes[j]!
    if (child.level !== level - 1) throw fail(`meta block ${j}, a node of level ${child.level}, not ${level - 1}`)
    const first = child.keys[0]!
    const last = child.keys[child.count - 1]!
    const next = e + 1 < keys.length ? keys[e + 1]! : 2 ** 32
    if (first < key || last >= next)
      throw fail(`meta block ${j}, whose keys ${first}..${last} are not in [${key}, ${next})`)
  }
}

// --- the checks a verifier shares with decodeObject ---

/** The data slot starting at byte `offset` of an object laid out as `layout`; −1 when none does. */
export function dataSlotAt(layout: ObjectLayout, offset: number): number {
  const rel = offset - layout.dataOffset
  if (rel < 0 || offset >= layout.dataEnd || rel % layout.dataBlockSize !== 0) return -1
  return rel / layout.dataBlockSize
}

/** The meta block starting at byte `offset`; −1 when none does. */
export function metaBlockAt(layout: ObjectLayout, offset: number): number {
  const rel = offset - layout.metaOffset
  if (rel < 0 || offset >= layout.metaEnd || rel % layout.metaBlockSize !== 0) return -1
  return rel / layout.metaBlockSize
}

/**
 * What is wrong with a node pointer at byte `offset` of an object of `layout`: that it
 * names no meta block of it (a data block may decode as a node: a file's content can hold
 * one); undefined when it names one.
 */
export function nodeOffsetProblem(layout: ObjectLayout, offset: number): string | undefined {
  if (metaBlockAt(layout, offset) >= 0) return undefined
  return `a node pointer names byte ${offset}, not a meta block (they lie in [${layout.metaOffset}, ${layout.metaEnd}))`
}

/**
 * Head first, the padding between summary and meta blocks must be zeros: the offset in
 * the object of the first byte that is not, or −1. `bytes` hold the object from byte `start`.
 */
export function paddingNotZero(bytes: Uint8Array, start: number, layout: ObjectLayout): number {
  if (layout.format !== FORMAT_PARTED) return -1
  const at = firstNonZero(bytes, layout.summaryEnd - start, layout.metaOffset - start)
  return at < 0 ? -1 : at + start
}

/**
 * Decodes the object's meta blocks from `bytes` (the object from byte `start`), each as a
 * node written by this checkpoint. A node that fails its checks throws, or, given
 * `onError`, is reported there and left out.
 */
export function decodeMetaBlocks(
  bytes: Uint8Array,
  start: number,
  header: Header,
  layout: ObjectLayout,
  where: (j: number, at: number) => string,
  onError?: (j: number, at: number, err: unknown) => void,
): BlockMapNode[] {
  const nodes: BlockMapNode[] = []
  for (let j = 0; j < header.metaCount; j++) {
    const at = layout.metaOffset + j * layout.metaBlockSize
    const node = bytes.subarray(at - start, at - start + layout.metaBlockSize)
    try {
      nodes.push(decodeNode(node, { cno: header.cno, maxCno: header.cno, where: where(j, at) }))
    } catch (err) {
      if (onError === undefined) throw err
      onError(j, at, err)
    }
  }
  return nodes
}

/**
 * Checks data slots `first`… whose bytes are `bytes` (whole slots; one buffer, or the
 * chunks of a GET in order) against the summary's CRC-32s, dead slots too, in one pass;
 * `bad` is called for each that does not match. Returns the number of slots checked.
 */
export function checkSlotCrcs(
  bytes: Uint8Array | readonly Uint8Array[],
  first: number,
  summary: Summary,
  blockSize: number,
  bad: (slot: number, computed: number) => void,
): number {
  const chunks = bytes instanceof Uint8Array ? [bytes] : bytes
  let total = 0
  for (const c of chunks) total += c.byteLength
  const n = Math.floor(total / blockSize)
  const crcs = new Uint32Array(Math.ceil(total / blockSize)) // a last partial slot's CRC is not checked
  crc32Chunks(chunks, blockSize, crcs)
  for (let i = 0; i < n; i++) {
    const computed = crcs[i] as number
    if (computed !== summary.crc[first + i]) bad(first + i, computed)
  }
  return n
}

/**
 * What a data slot whose CRC-32 does not match its summary entry is reported as; `at`,
 * the slot's byte offset, when the reader read it from a store.
 */
export function slotCrcMessage(where: string, summary: Summary, slot: number, computed: number, at?: number): string {
  const what = `data slot ${slot} (block ${summary.blockIndex[slot]}, ${summary.live[slot] ? 'live' : 'dead'})`
  const [got, want] = [hex32(computed), hex32(summary.crc[slot] as number)]
  return at === undefined
    ? `${where}: ${what} CRC ${got} computed, summary says ${want}`
    : `${where}: ${what} at byte ${at}: CRC-32 ${got} computed, the summary says ${want}`
}
