/**
 * The checkpoints of a container, for `ls`, `inspect` and `verify` (and any caller).
 *
 * - A checkpoint is openable when its part 0 exists. Parts of a cno without a part 0 are
 *   an abandoned attempt: listed apart, never openable (ERR_NOT_FOUND naming the cno).
 *   A part 0 newer than the published inode is a complete checkpoint whose publication
 *   was interrupted ('unpublished').
 * - `inspectCheckpoint` and `verifyCheckpoint` walk the checkpoint's whole block map from
 *   its inode, level by level, fetching per object spans of nodes (as the reader does),
 *   and visit every object the map reaches plus the checkpoint's own parts. Sizes come
 *   from one listing, so every header is checked against its object's real size.
 * - `verifyCheckpoint` reads every byte of those objects: header, summary, every meta
 *   block, every data slot's CRC (dead slots too), and every pointer of the map (a leaf's
 *   must name a live slot holding that very block, a node's a meta block of its object).
 *   What it finds is returned as problems, each with what and where; it throws only when
 *   it cannot start (no container, no such checkpoint) or the store itself fails.
 */

import { readObjectHeader } from '../container/object-header.js'
import { StreamSegmentError } from '../errors.js'
import {
  FLAG_CHECKPOINT,
  FLAG_PARTIAL,
  FLAG_SENT_AHEAD,
  formatName,
  HEADER_BYTES,
  type Header,
  objectLayout,
} from '../format/header.js'
import { decodeInodeObject, FORMAT_PARTED, type Inode } from '../format/inode.js'
import { INODE_KEY, parseKey, segmentKey } from '../format/names.js'
import { type BlockMapNode, decodeNode } from '../format/node.js'
import { firstNonZero, hex32, pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
import { decodeSummary, type Summary } from '../format/summary.js'
import { Limiter, NODE_SPAN_BYTES, nodeSpans } from '../read/reader.js'
import type { ObjectStore } from '../store/types.js'
import { crc32 } from '../util/crc32.js'

const MiB = 1024 * 1024
/** Data read per GET while verifying. */
const VERIFY_CHUNK = 16 * MiB
/** Problems kept per object; the rest are counted. */
const MAX_PROBLEMS_PER_OBJECT = 20

export interface CheckpointEntry {
  cno: number
  /** The file's size at this checkpoint (from its part 0's inode; −1 when unreadable). */
  size: number
  /** Objects this checkpoint wrote (its parts), and their bytes. */
  objects: number
  bytes: number
  /** When it was made (its inode's mtime, ms since the epoch). */
  timeMs: number
  state: 'published' | 'complete' | 'unpublished'
  /** Why its part 0 could not be read, if it could not. */
  error?: string
}

export interface AbandonedCheckpoint {
  cno: number
  parts: number
  bytes: number
}

export interface CheckpointList {
  /** The checkpoint the `inode` object names (0: none, or unreadable: see `inodeError`). */
  published: number
  inodeError?: string
  checkpoints: CheckpointEntry[]
  abandoned: AbandonedCheckpoint[]
}

interface Listing {
  sizes: Map<string, number>
  byCno: Map<number, { parts: number[]; bytes: number }>
  hasInode: boolean
}

async function listContainer(store: ObjectStore, signal?: AbortSignal): Promise<Listing> {
  const sizes = new Map<string, number>()
  const byCno = new Map<number, { parts: number[]; bytes: number }>()
  let hasInode = false
  for await (const e of store.list('', { signal })) {
    const k = parseKey(e.key)
    if (k === undefined) continue
    if (k.kind === 'inode') {
      hasInode = true
      continue
    }
    sizes.set(e.key, e.size)
    let c = byCno.get(k.cno)
    if (c === undefined) byCno.set(k.cno, (c = { parts: [], bytes: 0 }))
    c.parts.push(k.part)
    c.bytes += e.size
  }
  if (!hasInode && byCno.size === 0) {
    throw StreamSegmentError.notFound(`${store.url}: no container here (no ${INODE_KEY} object, no checkpoints)`)
  }
  return { sizes, byCno, hasInode }
}

async function readInodeObject(store: ObjectStore, signal?: AbortSignal): Promise<Inode> {
  try {
    return decodeInodeObject(await store.get(INODE_KEY, { signal }))
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_CORRUPT')) {
      throw StreamSegmentError.corrupt(`${store.url}/${INODE_KEY}: ${err.message}`, err)
    }
    throw err
  }
}

/**
 * A part 0's header, checked against the listed size. Its format is detected (the end
 * first, then the start): a checkpoint is opened by number without knowing the container's.
 */
async function readPart0(store: ObjectStore, cno: number, size: number, signal?: AbortSignal): Promise<Header> {
  return (await readObjectHeader(store, cno, 0, { size, signal })).header
}

/** Every checkpoint of the container, oldest first, and the abandoned attempts. */
export async function listCheckpoints(
  store: ObjectStore,
  options: { signal?: AbortSignal } = {},
): Promise<CheckpointList> {
  const { signal } = options
  const listing = await listContainer(store, signal)
  let published = 0
  let inodeError: string | undefined
  if (listing.hasInode) {
    try {
      published = (await readInodeObject(store, signal)).cno
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_CORRUPT') && !StreamSegmentError.is(err, 'ERR_UNSUPPORTED')) throw err
      inodeError = (err as Error).message
    }
  }
  const checkpoints: CheckpointEntry[] = []
  const abandoned: AbandonedCheckpoint[] = []
  const limiter = new Limiter(8)
  const cnos = [...listing.byCno.keys()].sort((a, b) => a - b)
  await Promise.all(
    cnos.map((cno) =>
      limiter.run(async () => {
        const c = listing.byCno.get(cno) as { parts: number[]; bytes: number }
        if (!c.parts.includes(0)) {
          abandoned.push({ cno, parts: c.parts.length, bytes: c.bytes })
          return
        }
        const entry: CheckpointEntry = {
          cno,
          size: -1,
          objects: c.parts.length,
          bytes: c.bytes,
          timeMs: 0,
          state: cno === published ? 'published' : cno > published ? 'unpublished' : 'complete',
        }
        try {
          const h = await readPart0(store, cno, listing.sizes.get(segmentKey(cno, 0)) as number, signal)
          entry.size = h.inode.size
          entry.timeMs = h.inode.mtimeMs
        } catch (err) {
          if (!StreamSegmentError.is(err, 'ERR_CORRUPT') && !StreamSegmentError.is(err, 'ERR_UNSUPPORTED')) throw err
          entry.error = (err as Error).message
        }
        checkpoints.push(entry)
      }),
    ),
  )
  checkpoints.sort((a, b) => a.cno - b.cno)
  abandoned.sort((a, b) => a.cno - b.cno)
  return { published, ...(inodeError === undefined ? {} : { inodeError }), checkpoints, abandoned }
}

/** The inode of checkpoint `cno` (default: the published one), with ERR_NOT_FOUND for abandoned ones. */
async function resolveCheckpoint(
  store: ObjectStore,
  listing: Listing,
  cno: number | undefined,
  signal?: AbortSignal,
): Promise<{ inode: Inode; part0: Header | undefined }> {
  if (cno !== undefined && (!Number.isSafeInteger(cno) || cno < 1)) {
    throw StreamSegmentError.invalidArgument(`cno must be a positive integer, got ${cno}`)
  }
  if (cno === undefined) {
    if (!listing.hasInode) {
      throw StreamSegmentError.notFound(`${store.url}: no published checkpoint (no ${INODE_KEY} object); give a cno`)
    }
    const inode = await readInodeObject(store, signal)
    return { inode, part0: undefined }
  }
  const c = listing.byCno.get(cno)
  if (c === undefined) throw StreamSegmentError.notFound(`${store.url}: no checkpoint ${cno}`)
  if (!c.parts.includes(0)) {
    throw StreamSegmentError.notFound(
      `${store.url}: checkpoint ${cno} was abandoned (${c.parts.length} parts, no part 0): it cannot be opened`,
    )
  }
  const part0 = await readPart0(store, cno, listing.sizes.get(segmentKey(cno, 0)) as number, signal)
  return { inode: part0.inode, part0 }
}

// --- the whole-map walk ---

interface Ref {
  hi: number
  lo: number
  level: number
  minKey: number
  upper: number
  offset: number
  needed: boolean
  where: string
}

interface Reached {
  /** Node pointers into the object: byte offsets. */
  nodes: number[]
  /** Data pointers: byte offsets, and the block each names. */
  dataAt: number[]
  dataBlock: number[]
}

export interface Problem {
  code: 'ERR_CORRUPT' | 'ERR_NOT_FOUND' | 'ERR_UNSUPPORTED'
  /** What failed: the inode, an object missing, a header, a summary, a node, a data block, a pointer. */
  what: 'inode' | 'missing' | 'header' | 'summary' | 'node' | 'block' | 'pointer'
  /** The key, and the byte offset in it when there is one. */
  where: string
  message: string
}

interface MapWalk {
  reached: Map<string, Reached>
  nodes: number
  leaves: number
  dataPointers: number
  holes: number
  height: number
}

function toProblem(err: unknown, what: Problem['what'], where: string): Problem {
  if (
    StreamSegmentError.is(err, 'ERR_CORRUPT') ||
    StreamSegmentError.is(err, 'ERR_NOT_FOUND') ||
    StreamSegmentError.is(err, 'ERR_UNSUPPORTED')
  ) {
    return { code: err.code as Problem['code'], what, where, message: err.message }
  }
  throw err
}

/** Walks every node reachable from `inode`; nodes that fail their checks become problems. */
async function walkMap(store: ObjectStore, inode: Inode, problems: Problem[], signal?: AbortSignal): Promise<MapWalk> {
  const mbs = 2 ** inode.metaShift
  const walk: MapWalk = { reached: new Map(), nodes: 0, leaves: 0, dataPointers: 0, holes: 0, height: inode.rootLevel }
  const reach = (key: string): Reached => {
    let r = walk.reached.get(key)
    if (r === undefined) walk.reached.set(key, (r = { nodes: [], dataAt: [], dataBlock: [] }))
    return r
  }
  const limiter = new Limiter(8)
  // Entries of the level being visited: (keys, pointers, level, upper bound), as the root's.
  type Entries = { level: number; keys: Uint32Array; hi: Uint32Array; lo: Uint32Array; count: number; upper: number }
  let level: Entries[] = [
    {
      level: inode.rootLevel,
      keys: inode.rootKeys,
      hi: inode.rootPtrHi,
      lo: inode.rootPtrLo,
      count: inode.rootCount,
      upper: 2 ** 32,
    },
  ]
  while (level.length > 0) {
    const refs = new Map<string, Ref[]>()
    for (const e of level) {
      for (let i = 0; i < e.count; i++) {
        const hi = e.hi[i] as number
        const lo = e.lo[i] as number
        const key = e.keys[i] as number
        if (e.level === 0) {
          if (hi === 0 && lo === 0) {
            walk.holes++
            continue
          }
          const r = reach(segmentKey(hi, pointerPart(lo)))
          r.dataAt.push(pointerUnit(lo) * UNIT_BYTES)
          r.dataBlock.push(key)
          walk.dataPointers++
          continue
        }
        const objectKey = segmentKey(hi, pointerPart(lo))
        const offset = pointerUnit(lo) * UNIT_BYTES
        reach(objectKey).nodes.push(offset)
        const upper = i + 1 < e.count ? (e.keys[i + 1] as number) : e.upper
        const ref: Ref = {
          hi,
          lo,
          level: e.level - 1,
          minKey: key,
          upper,
          offset,
          needed: true,
          where: `${objectKey} byte ${offset}`,
        }
        const list = refs.get(objectKey)
        if (list === undefined) refs.set(objectKey, [ref])
        else list.push(ref)
      }
    }
    const next: Entries[] = []
    await Promise.all(
      [...refs].flatMap(([key, list]) =>
        nodeSpans(list, mbs, NODE_SPAN_BYTES).map((span) =>
          limiter.run(async () => {
            let bytes: Uint8Array
            try {
              bytes = await store.get(key, { range: { start: span.start, end: span.end }, signal })
            } catch (err) {
              const what = StreamSegmentError.is(err, 'ERR_NOT_FOUND') ? 'missing' : 'node'
              if (StreamSegmentError.is(err, 'ERR_RANGE')) {
                problems.push({
                  code: 'ERR_CORRUPT',
                  what: 'pointer',
                  where: `${key} byte ${span.start}`,
                  message: `${store.url}/${key}: nodes are pointed at from byte ${span.start}, past the object's end`,
                })
                return
              }
              problems.push(toProblem(err, what, key))
              return
            }
            for (const r of span.refs) {
              const at = r.offset - span.start
              try {
                if (at + mbs > bytes.byteLength) {
                  throw StreamSegmentError.corrupt(`${store.url}/${r.where}: node pointed at past the object's end`)
                }
                const n: BlockMapNode = decodeNode(bytes.subarray(at, at + mbs), {
                  level: r.level,
                  minKey: r.minKey,
                  maxKeyExclusive: r.upper,
                  cno: r.hi,
                  maxCno: inode.cno,
                  where: `${store.url}/${r.where}`,
                })
                walk.nodes++
                if (n.level === 0) walk.leaves++
                next.push({ level: n.level, keys: n.keys, hi: n.ptrHi, lo: n.ptrLo, count: n.count, upper: r.upper })
              } catch (err) {
                problems.push(toProblem(err, 'node', r.where))
              }
            }
          }),
        ),
      ),
    )
    level = next
  }
  return walk
}

// --- inspect ---

export interface ObjectReport {
  key: string
  cno: number
  part: number
  /** Listed size (−1: missing). */
  size: number
  /** Written by this checkpoint (one of its parts). */
  own: boolean
  /** Pointers of this checkpoint's block map into the object. */
  reachedNodes: number
  reachedBlocks: number
  header?: {
    flags: string[]
    dataShift: number
    metaShift: number
    dataCount: number
    metaCount: number
    summaryCount: number
    summaryCrc: string
    createdMs: number
    baseCno: number
    inodeCno: number
    inodeSize: number
  }
  liveSlots?: number
  deadSlots?: number
  error?: string
}

export interface InspectReport {
  url: string
  cno: number
  published: boolean
  /** 'StreamSegment' or 'PartedSegment': the container's layout. */
  format: string
  size: number
  dataBlockSize: number
  metaBlockSize: number
  ctimeMs: number
  mtimeMs: number
  tree: { height: number; nodes: number; leaves: number; dataPointers: number; holes: number }
  objects: ObjectReport[]
  /** Nodes that could not be read while walking. */
  problems: Problem[]
}

function flagNames(flags: number): string[] {
  const out: string[] = []
  if (flags & FLAG_CHECKPOINT) out.push('CHECKPOINT')
  if (flags & FLAG_PARTIAL) out.push('PARTIAL')
  if (flags & FLAG_SENT_AHEAD) out.push('SENT_AHEAD')
  return out
}

/** The objects of the keys the map reaches, plus the checkpoint's own parts, in key order. */
function objectKeys(listing: Listing, cno: number, walk: MapWalk): string[] {
  const keys = new Set(walk.reached.keys())
  for (const part of listing.byCno.get(cno)?.parts ?? []) keys.add(segmentKey(cno, part))
  return [...keys].sort()
}

/** Every object of checkpoint `cno` (default: the published one): headers, counts, dead slots. */
export async function inspectCheckpoint(
  store: ObjectStore,
  options: { cno?: number; signal?: AbortSignal } = {},
): Promise<InspectReport> {
  const { signal } = options
  const listing = await listContainer(store, signal)
  const { inode } = await resolveCheckpoint(store, listing, options.cno, signal)
  const problems: Problem[] = []
  const walk = await walkMap(store, inode, problems, signal)
  const limiter = new Limiter(8)
  const objects = await Promise.all(
    objectKeys(listing, inode.cno, walk).map((key) =>
      limiter.run(async (): Promise<ObjectReport> => {
        const k = parseKey(key) as { cno: number; part: number }
        const reached = walk.reached.get(key)
        const size = listing.sizes.get(key) ?? -1
        const report: ObjectReport = {
          key,
          cno: k.cno,
          part: k.part,
          size,
          own: k.cno === inode.cno,
          reachedNodes: reached?.nodes.length ?? 0,
          reachedBlocks: reached?.dataAt.length ?? 0,
        }
        if (size < 0) {
          report.error = 'missing'
          return report
        }
        try {
          const { header: h } = await readObjectHeader(store, k.cno, k.part, { format: inode.format, size, signal })
          report.header = {
            flags: flagNames(h.flags),
            dataShift: h.dataShift,
            metaShift: h.metaShift,
            dataCount: h.dataCount,
            metaCount: h.metaCount,
            summaryCount: h.dataCount,
            summaryCrc: hex32(h.summaryCrc),
            createdMs: h.createdMs,
            baseCno: h.baseInode.cno,
            inodeCno: h.inode.cno,
            inodeSize: h.inode.size,
          }
          const s = await readSummary(store, key, h, signal)
          let live = 0
          for (let i = 0; i < s.count; i++) live += s.live[i] as number
          report.liveSlots = live
          report.deadSlots = s.count - live
        } catch (err) {
          report.error = toProblem(err, 'header', key).message
        }
        return report
      }),
    ),
  )
  return {
    url: store.url,
    cno: inode.cno,
    published: listing.hasInode && inode.cno === (await publishedCno(store, signal)),
    format: formatName(inode.format),
    size: inode.size,
    dataBlockSize: 2 ** inode.dataShift,
    metaBlockSize: 2 ** inode.metaShift,
    ctimeMs: inode.ctimeMs,
    mtimeMs: inode.mtimeMs,
    tree: {
      height: walk.height,
      nodes: walk.nodes,
      leaves: walk.leaves,
      dataPointers: walk.dataPointers,
      holes: walk.holes,
    },
    objects,
    problems,
  }
}

async function publishedCno(store: ObjectStore, signal?: AbortSignal): Promise<number> {
  try {
    return (await readInodeObject(store, signal)).cno
  } catch {
    return 0
  }
}

async function readSummary(store: ObjectStore, key: string, h: Header, signal?: AbortSignal): Promise<Summary> {
  const layout = objectLayout(h, h)
  const bytes =
    h.dataCount === 0
      ? new Uint8Array(0)
      : await store.get(key, { range: { start: layout.summaryOffset, end: layout.summaryEnd }, signal })
  return decodeSummary(bytes, { count: h.dataCount, summaryCrc: h.summaryCrc, where: `${store.url}/${key}` })
}

// --- verify ---

export interface VerifyReport {
  url: string
  cno: number
  objects: number
  nodes: number
  dataPointers: number
  /** Data slots whose CRC was checked (dead ones too), and bytes read. */
  slots: number
  bytesRead: number
  problems: Problem[]
}

/**
 * Checks every header, summary, node and block CRC reachable from checkpoint `cno`
 * (default: the published one), and every pointer of its block map. Problems are
 * returned, not thrown.
 */
export async function verifyCheckpoint(
  store: ObjectStore,
  options: { cno?: number; signal?: AbortSignal; onProgress?: (bytes: number) => void } = {},
): Promise<VerifyReport> {
  const { signal } = options
  const listing = await listContainer(store, signal)
  const problems: Problem[] = []
  let inode: Inode
  let part0: Header | undefined
  try {
    ;({ inode, part0 } = await resolveCheckpoint(store, listing, options.cno, signal))
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_NOT_FOUND') || StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT')) throw err
    const where = options.cno === undefined ? INODE_KEY : segmentKey(options.cno, 0)
    problems.push(toProblem(err, options.cno === undefined ? 'inode' : 'header', where))
    return {
      url: store.url,
      cno: options.cno ?? 0,
      objects: 0,
      nodes: 0,
      dataPointers: 0,
      slots: 0,
      bytesRead: 0,
      problems,
    }
  }
  if (!listing.hasInode) {
    problems.push({
      code: 'ERR_NOT_FOUND',
      what: 'missing',
      where: INODE_KEY,
      message: `${store.url}/${INODE_KEY}: no such object, but the container has checkpoints: nothing is published`,
    })
  } else if (options.cno !== undefined) {
    // The commit point is checked whatever checkpoint is verified: it is the container's entry.
    try {
      const published = await readInodeObject(store, signal)
      if (published.cno === inode.cno && !sameInode(published, inode)) {
        problems.push({
          code: 'ERR_CORRUPT',
          what: 'inode',
          where: INODE_KEY,
          message: `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, but differs from the inode in its part 0`,
        })
      }
    } catch (err) {
      problems.push(toProblem(err, 'inode', INODE_KEY))
    }
  }
  const walk = await walkMap(store, inode, problems, signal)
  const report: VerifyReport = {
    url: store.url,
    cno: inode.cno,
    objects: 0,
    nodes: walk.nodes,
    dataPointers: walk.dataPointers,
    slots: 0,
    bytesRead: 0,
    problems,
  }
  const limiter = new Limiter(4)
  await Promise.all(
    objectKeys(listing, inode.cno, walk).map((key) =>
      limiter.run(async () => {
        report.objects++
        const found: Problem[] = []
        await verifyObject(
          store,
          key,
          listing.sizes.get(key),
          walk.reached.get(key),
          inode,
          part0,
          found,
          report,
          options,
        )
        if (found.length > MAX_PROBLEMS_PER_OBJECT) {
          const more = found.length - MAX_PROBLEMS_PER_OBJECT
          found.length = MAX_PROBLEMS_PER_OBJECT
          found.push({
            code: 'ERR_CORRUPT',
            what: 'block',
            where: key,
            message: `${store.url}/${key}: and ${more} more problems`,
          })
        }
        problems.push(...found)
      }),
    ),
  )
  problems.sort((a, b) => (a.where < b.where ? -1 : a.where > b.where ? 1 : 0))
  return report
}

async function verifyObject(
  store: ObjectStore,
  key: string,
  size: number | undefined,
  reached: Reached | undefined,
  inode: Inode,
  part0: Header | undefined,
  problems: Problem[],
  report: VerifyReport,
  options: { signal?: AbortSignal; onProgress?: (bytes: number) => void },
): Promise<void> {
  const { signal } = options
  const k = parseKey(key) as { cno: number; part: number }
  const url = `${store.url}/${key}`
  if (size === undefined) {
    const what = `${reached?.nodes.length ?? 0} nodes and ${reached?.dataAt.length ?? 0} blocks`
    problems.push({
      code: 'ERR_NOT_FOUND',
      what: 'missing',
      where: key,
      message: `${url}: no such object, but the block map of checkpoint ${inode.cno} points at ${what} in it`,
    })
    return
  }
  const got = async (start: number, end: number) => {
    const b = await store.get(key, { range: { start, end }, signal })
    report.bytesRead += b.byteLength
    options.onProgress?.(report.bytesRead)
    return b
  }
  let header: Header
  try {
    header = (await readObjectHeader(store, k.cno, k.part, { format: inode.format, size, signal })).header
    report.bytesRead += HEADER_BYTES
  } catch (err) {
    const at = inode.format === FORMAT_PARTED ? 0 : Math.max(0, size - HEADER_BYTES)
    problems.push(toProblem(err, 'header', `${key} byte ${at}`))
    return
  }
  if (k.part === 0 && k.cno === inode.cno && part0 === undefined && !sameInode(header.inode, inode)) {
    problems.push({
      code: 'ERR_CORRUPT',
      what: 'inode',
      where: INODE_KEY,
      message: `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, but differs from the inode in its part 0 (${key})`,
    })
  }
  const layout = objectLayout(header, header)
  // Meta blocks and summary (head first, the padding between them too) in one GET.
  let summary: Summary | undefined
  const regionStart = Math.min(layout.metaOffset, layout.summaryOffset)
  const regionEnd = Math.max(layout.metaEnd, layout.summaryEnd)
  if (regionEnd > regionStart) {
    let region: Uint8Array
    try {
      region = await got(regionStart, regionEnd)
      if (region.byteLength !== regionEnd - regionStart) {
        throw StreamSegmentError.corrupt(`${url}: short read of the meta blocks and summary`)
      }
    } catch (err) {
      problems.push(toProblem(err, 'summary', `${key} byte ${regionStart}`))
      return
    }
    try {
      summary = decodeSummary(region.subarray(layout.summaryOffset - regionStart, layout.summaryEnd - regionStart), {
        count: header.dataCount,
        summaryCrc: header.summaryCrc,
        where: url,
      })
    } catch (err) {
      problems.push(toProblem(err, 'summary', `${key} byte ${layout.summaryOffset}`))
    }
    if (layout.format === FORMAT_PARTED) {
      const pad = firstNonZero(region, layout.summaryEnd - regionStart, layout.metaOffset - regionStart)
      if (pad >= 0) {
        problems.push({
          code: 'ERR_CORRUPT',
          what: 'summary',
          where: `${key} byte ${pad + regionStart}`,
          message: `${url}: padding byte ${pad + regionStart} after the summary is not zero`,
        })
      }
    }
    for (let j = 0; j < header.metaCount; j++) {
      const at = layout.metaOffset + j * layout.metaBlockSize
      const where = `${key} byte ${at}`
      try {
        decodeNode(region.subarray(at - regionStart, at - regionStart + layout.metaBlockSize), {
          cno: header.cno,
          maxCno: header.cno,
          where: `${store.url}/${where} (meta block ${j})`,
        })
      } catch (err) {
        problems.push(toProblem(err, 'node', where))
      }
    }
  }
  // Pointers into this object.
  for (const offset of reached?.nodes ?? []) {
    const rel = offset - layout.metaOffset
    if (rel < 0 || offset >= layout.metaEnd || rel % layout.metaBlockSize !== 0) {
      problems.push({
        code: 'ERR_CORRUPT',
        what: 'pointer',
        where: `${key} byte ${offset}`,
        message: `${url}: a node pointer names byte ${offset}, not a meta block (they lie in [${layout.metaOffset}, ${layout.metaEnd}))`,
      })
    }
  }
  const bs = layout.dataBlockSize
  if (reached !== undefined && summary !== undefined) {
    for (let i = 0; i < reached.dataAt.length; i++) {
      const at = reached.dataAt[i] as number
      const block = reached.dataBlock[i] as number
      const slot = (at - layout.dataOffset) / bs
      let problem: string | undefined
      if (!Number.isInteger(slot) || slot < 0 || slot >= header.dataCount) {
        problem = `not one of its ${header.dataCount} data slots`
      } else if (summary.blockIndex[slot] !== block)
        problem = `slot ${slot}, which holds block ${summary.blockIndex[slot]}`
      else if (summary.live[slot] !== 1) problem = `slot ${slot}, which is dead (block ${block} was written again)`
      if (problem !== undefined) {
        problems.push({
          code: 'ERR_CORRUPT',
          what: 'pointer',
          where: `${key} byte ${at}`,
          message: `${url}: the block map points block ${block} at byte ${at}, ${problem}`,
        })
      }
    }
  }
  // Every data slot's CRC, dead ones too.
  if (summary === undefined) return
  const perChunk = Math.max(1, Math.floor(VERIFY_CHUNK / bs))
  for (let first = 0; first < header.dataCount; first += perChunk) {
    const n = Math.min(perChunk, header.dataCount - first)
    const start = layout.dataOffset + first * bs
    let bytes: Uint8Array
    try {
      bytes = await got(start, start + n * bs)
      if (bytes.byteLength !== n * bs) throw StreamSegmentError.corrupt(`${url}: short read at ${start}`)
    } catch (err) {
      problems.push(toProblem(err, 'block', `${key} byte ${start}`))
      return
    }
    for (let i = 0; i < n; i++) {
      const slot = first + i
      const at = start + i * bs
      const computed = crc32(bytes.subarray(i * bs, (i + 1) * bs))
      report.slots++
      if (computed !== summary.crc[slot]) {
        problems.push({
          code: 'ERR_CORRUPT',
          what: 'block',
          where: `${key} byte ${at}`,
          message: `${url}: data slot ${slot} (block ${summary.blockIndex[slot]}, ${summary.live[slot] ? 'live' : 'dead'}) at byte ${at}: CRC-32 ${hex32(computed)} computed, the summary says ${hex32(summary.crc[slot] as number)}`,
        })
      }
    }
  }
}

function sameInode(a: Inode, b: Inode): boolean {
  if (a.size !== b.size || a.cno !== b.cno || a.rootLevel !== b.rootLevel || a.rootCount !== b.rootCount) return false
  for (let i = 0; i < a.rootCount; i++) {
    if (a.rootKeys[i] !== b.rootKeys[i] || a.rootPtrHi[i] !== b.rootPtrHi[i] || a.rootPtrLo[i] !== b.rootPtrLo[i]) {
      return false
    }
  }
  return true
}
