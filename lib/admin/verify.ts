/**
 * `verify`: every header, summary, node and data block CRC reachable from one
 * checkpoint, and every pointer of its block map (a leaf's must name a live slot holding
 * that very block, a node's a meta block of its object). Every byte of those objects is
 * read, 16 MiB at a time. What it finds is returned as problems, each with what and
 * where; it throws only when it cannot start (no container, no such checkpoint) or the
 * store itself fails.
 */

import { sameInode } from '../container/inode.js'
import { listContainer } from '../container/listing.js'
import { readObjectHeader } from '../container/object-header.js'
import { objectExists, readExact, readExactChunks } from '../container/objects.js'
import { throwIfAborted } from '../errors.js'
import { HEADER_BYTES, type Header, type ObjectLayout, objectLayout } from '../format/header.js'
import { FORMAT_PARTED, type Inode, madeHere } from '../format/inode.js'
import { INODE_KEY, parseKey, segmentKey } from '../format/names.js'
import { checkSlotCrcs, dataSlotAt, decodeMetaBlocks, paddingNotZero, slotCrcMessage } from '../format/object.js'
import { decodeSummary, type Summary } from '../format/summary.js'
import { checkCallOptions } from '../settings.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { givePieces } from '../util/piece-pool.js'
import { isoTime } from '../util/time.js'
import { asError } from '../util/typed-arrays.js'
import { MiB } from '../util/units.js'
import { objectKeys } from './inspect.js'
import { checkPublished, resolveOrReport } from './list.js'
import {
  byPlace,
  type MapWalk,
  missingWhy,
  nodePointerProblems,
  ObjectProblems,
  type Problem,
  type Reached,
  toProblem,
  walkMap,
} from './map-walk.js'

/** Data read per GET while verifying. */
const VERIFY_CHUNK = 16 * MiB

export interface VerifyReport {
  url: string
  cno: number
  objects: number
  nodes: number
  dataPointers: number
  /** Empty claims of multipart uploads that never completed, under this checkpoint's number: skipped. */
  placeholders: number
  /** Data slots whose CRC was checked (dead ones too), and bytes read. */
  slots: number
  bytesRead: number
  problems: Problem[]
}

/** A report with nothing counted yet but the walk's nodes and pointers. */
function newReport(url: string, cno: number, problems: Problem[], walk?: MapWalk): VerifyReport {
  const nodes = walk?.nodes ?? 0
  const dataPointers = walk?.dataPointers ?? 0
  return { url, cno, objects: 0, nodes, dataPointers, placeholders: 0, slots: 0, bytesRead: 0, problems }
}

/**
 * Checks every header, summary, node and block CRC reachable from checkpoint `cno`
 * (default: the published one), and every pointer of its block map. Problems are
 * returned, not thrown.
 * A store rejection that is no Error (a store outside the contract) is ERR_STORE naming
 * the call and the container (asError).
 */
export async function verifyCheckpoint(
  where: StoreLocation | ObjectStore,
  options: { cno?: number; signal?: AbortSignal; onProgress?: (bytes: number) => void } = {},
): Promise<VerifyReport> {
  const store = storeAt(where, 'verifyCheckpoint')
  return await verifyOf(store, options).catch((err) => {
    throw asError(err, () => `verifyCheckpoint of ${store.url}`)
  })
}

async function verifyOf(
  store: ObjectStore,
  options: { cno?: number; signal?: AbortSignal; onProgress?: (bytes: number) => void },
): Promise<VerifyReport> {
  checkCallOptions('verifyCheckpoint', options, ['cno', 'signal', 'onProgress'])
  const { signal } = options
  throwIfAborted(signal, `verifyCheckpoint of ${store.url}`)
  const listing = await listContainer(store, signal)
  const problems: Problem[] = []
  const resolved = await resolveOrReport(store, listing, options.cno, problems, signal)
  if (resolved === undefined) return newReport(store.url, options.cno ?? 0, problems)
  const { inode, part0 } = resolved
  // The commit point is checked whatever checkpoint is verified: it is the container's entry.
  await checkPublished(store, listing, inode, options.cno, problems, signal)
  const walk = await walkMap(store, inode, problems, signal)
  const report = newReport(store.url, inode.cno, problems, walk)
  const limiter = new Limiter(4)
  const startedMs = Date.now()
  await Promise.all(
    objectKeys(listing, inode.cno, walk).map((key) =>
      limiter.run(async () => {
        report.objects++
        const found = new ObjectProblems(store.url, key)
        const ctx = { store, inode, part0, report, options, problems: found, missing: walk.missing, startedMs }
        await verifyObject(ctx, key, {
          size: listing.sizes.get(key),
          reached: walk.reached.get(key),
        })
        problems.push(...found.done())
      }),
    ),
  )
  problems.sort(byPlace)
  return report
}

/**
 * Whether a complete checkpoint that was never published may be (a writer's roll-forward,
 * on top of checkpoint `publishedCno`): what it added, checked as `verify` checks it. The
 * nodes of numbers above the published one are walked from its inode (its own, and those
 * of numbers between that it took over: an object a resume continued), each checked
 * against its parent's entry; every object of such a number that they reach must exist
 * (`sizes`: the objects listed above the published number); its part 0 is checked whole
 * (header, summary, nodes, every data slot's CRC), the other objects by their headers,
 * summaries and nodes, and the pointers into them must name live slots holding their
 * blocks. A node of a lower number a walked node points at is read (the nodes of one
 * object a span at a time, as the walk reads them) and checked against that pointer's
 * entry — its level, its keys within the entry's range — but not walked below (published
 * ones were checked when they were published): a roll-forward must not publish a map whose
 * new nodes point at an old node of another level or range. Every other object of a lower
 * number the walked nodes point into (data only) must still exist, a HEAD each: a cleaner
 * may have taken one of a number never published, whose data parts a conflict retry kept.
 * The cost is about three requests per new object, one per older one (a GET of its nodes
 * pointed at, or a HEAD), and the bytes of part 0. Problems are returned, not thrown, as
 * many per object as verifyCheckpoint keeps.
 */
export async function checkUnpublished(
  store: ObjectStore,
  inode: Inode,
  publishedCno: number,
  sizes: ReadonlyMap<string, { size: number }>,
  signal?: AbortSignal,
): Promise<Problem[]> {
  const problems: Problem[] = []
  const walk = await walkMap(store, inode, problems, signal, { newerThan: publishedCno })
  const keys = new Set([...walk.reached.keys()].filter((key) => (parseKey(key) as { cno: number }).cno > publishedCno))
  keys.add(segmentKey(inode.cno, 0))
  const report = newReport(store.url, inode.cno, problems, walk)
  // The objects of published numbers the new nodes point into must still be there (a
  // cleaner may have taken those of a number never published, whose parts a conflict
  // retry kept): a HEAD each, but for those whose nodes the walk read (`skipped`: a node
  // it could not read is a problem already).
  const older = new Set(
    [...walk.reached.keys()].filter(
      (key) => (parseKey(key) as { cno: number }).cno <= publishedCno && !walk.skipped.has(key),
    ),
  )
  const limiter = new Limiter(4)
  await Promise.all(
    [...older].map((key) =>
      limiter.run(async () => {
        if (!(await objectExists(store, key, signal))) {
          problems.push({
            code: 'ERR_NOT_FOUND',
            what: 'missing',
            where: key,
            message: `${store.url}/${key}: no such object, but checkpoint ${inode.cno} points into it`,
          })
        }
      }),
    ),
  )
  await Promise.all(
    [...keys].sort().map((key) =>
      limiter.run(async () => {
        // Its first problems kept, the rest counted, as verifyCheckpoint keeps them.
        const found = new ObjectProblems(store.url, key)
        await verifyObject(
          {
            store,
            inode,
            part0: undefined,
            report,
            options: { signal },
            problems: found,
            missing: walk.missing,
            startedMs: Date.now(),
          },
          key,
          {
            size: sizes.get(key)?.size,
            reached: walk.reached.get(key),
            slots: key === segmentKey(inode.cno, 0),
          },
        )
        for (const p of found.done()) problems.push(p)
      }),
    ),
  )
  return problems
}

/** What every object of one verification shares. */
interface VerifyContext {
  store: ObjectStore
  /** The checkpoint verified, and its part 0's header when it was named by number. */
  inode: Inode
  part0: Header | undefined
  report: VerifyReport
  options: { signal?: AbortSignal; onProgress?: (bytes: number) => void }
  /** Where this object's problems go. */
  problems: { push(p: Problem): void }
  /** Objects of nodes the walk found gone: a problem each already. */
  missing: ReadonlyMap<string, number>
  /** When the verification started: a reader opened then takes a header's ctime up to it (madeHere). */
  startedMs: number
}

/** One object under verification: its key, URL and header, with the layout the header gives. */
interface ObjectCheck {
  ctx: VerifyContext
  key: string
  url: string
  header: Header
  layout: ObjectLayout
}

/**
 * One object, region by region: its header (against the listed size), meta blocks and
 * summary (in one GET, or in chunks when larger), the map's pointers into it, then every
 * data slot's CRC in chunks. A region that cannot be read ends the object's checks there.
 * The checks are format/object.ts's, as decodeObject runs them on a whole object.
 */
async function verifyObject(
  ctx: VerifyContext,
  key: string,
  found: { size: number | undefined; reached: Reached | undefined; slots?: boolean },
): Promise<void> {
  const { size, reached, slots = true } = found
  // The walk reported it (and may have found it gone after the listing saw it).
  if (ctx.missing.has(key)) return
  if (size === undefined) {
    ctx.problems.push({
      code: 'ERR_NOT_FOUND',
      what: 'missing',
      where: key,
      message: `${ctx.store.url}/${key}: ${missingWhy(ctx.inode, key, reached)}`,
    })
    return
  }
  // An empty object the block map does not reach is the claim of a multipart upload that
  // never completed (an abandoned attempt at this number): not part of the checkpoint.
  if (size === 0 && reached === undefined && (parseKey(key) as { part: number }).part !== 0) {
    ctx.report.placeholders++
    return
  }
  const o = await checkHeader(ctx, key, size)
  if (o === undefined) return
  const meta = await checkMetaRegion(o)
  if (meta === undefined) return
  // The block map's node pointers into the object must name its meta blocks.
  for (const p of nodePointerProblems(o.url, o.key, o.layout, reached)) o.ctx.problems.push(p)
  if (meta.summary === undefined) return
  checkDataPointers(o, meta.summary, reached)
  if (slots) await checkDataSlots(o, meta.summary)
}

/** Reads [start, end) of the object, counted as read. */
async function readCounted(o: ObjectCheck, start: number, end: number): Promise<Uint8Array> {
  const b = await readExact(o.ctx.store, o.key, start, end, o.ctx.options.signal)
  counted(o.ctx, b.byteLength)
  return b
}

function counted(ctx: VerifyContext, n: number): void {
  ctx.report.bytesRead += n
  ctx.options.onProgress?.(ctx.report.bytesRead)
}

/**
 * The object's header, checked against the listed size, the container (an object of
 * another one ends the object's checks there), and, for the verified checkpoint's part 0,
 * its inode.
 */
async function checkHeader(ctx: VerifyContext, key: string, size: number): Promise<ObjectCheck | undefined> {
  const { store, inode, problems } = ctx
  const k = parseKey(key) as { cno: number; part: number }
  let header: Header
  try {
    header = (await readObjectHeader(store, k.cno, k.part, { format: inode.format, size, signal: ctx.options.signal }))
      .header
    ctx.report.bytesRead += HEADER_BYTES
  } catch (err) {
    const at = inode.format === FORMAT_PARTED ? 0 : Math.max(0, size - HEADER_BYTES)
    problems.push(toProblem(err, 'header', `${key} byte ${at}`))
    return undefined
  }
  if (!madeHereForReaders(ctx, header.inode.ctimeMs)) {
    const at = isoTime
    problems.push({
      code: 'ERR_NOT_FOUND',
      what: 'header',
      where: key,
      message: `${store.url}/${key}: its header names a container made at ${at(header.inode.ctimeMs)}, not this one (made at ${at(inode.ctimeMs)}; checkpoint ${inode.cno} written at ${at(inode.mtimeMs)}): readers take it for an object of a container made again here and fail with ERR_NOT_FOUND`,
    })
    return undefined
  }
  if (k.part === 0 && k.cno === inode.cno && ctx.part0 === undefined && !sameInode(header.inode, inode)) {
    problems.push({
      code: 'ERR_CORRUPT',
      what: 'inode',
      where: INODE_KEY,
      message: `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, but differs from the inode in its part 0 (${key})`,
    })
  }
  return { ctx, key, url: `${store.url}/${key}`, header, layout: objectLayout(header, header) }
}

/**
 * Whether readers take an object whose header names a container made at `ctimeMs` for one
 * of this container, as a reader opened when the verification started does (FileState's
 * madeHere): a later one is a container made again at this place since (or a header
 * crafted so), and a reader fails there with ERR_NOT_FOUND.
 */
function madeHereForReaders(ctx: VerifyContext, ctimeMs: number): boolean {
  const { inode, startedMs } = ctx
  return madeHere(ctimeMs, inode.ctimeMs, Math.max(inode.mtimeMs, startedMs))
}

/**
 * Meta blocks and summary (head first, the padding between them too) in one GET when
 * they fit in VERIFY_CHUNK; else the summary (and padding) first, then the meta blocks
 * VERIFY_CHUNK at a time, as the data slots: a header counting 1 GiB of meta blocks never
 * makes one buffer of them. Undefined when a read failed; else the summary, when it
 * checked out.
 */
async function checkMetaRegion(o: ObjectCheck): Promise<{ summary: Summary | undefined } | undefined> {
  const { key, url, header, layout } = o
  const { problems } = o.ctx
  const nodeProblem = (_j: number, at: number, err: unknown) =>
    problems.push(toProblem(err, 'node', `${key} byte ${at}`))
  let summary: Summary | undefined
  const regionStart = Math.min(layout.metaOffset, layout.summaryOffset)
  const regionEnd = Math.max(layout.metaEnd, layout.summaryEnd)
  const whole = regionEnd - regionStart <= VERIFY_CHUNK
  // Head first the padding runs from the summary's end to the meta blocks; tail first they lie below.
  const [start, end] = whole
    ? [regionStart, regionEnd]
    : [layout.summaryOffset, Math.max(layout.summaryEnd, layout.metaOffset)]
  if (end > start) {
    let region: Uint8Array
    try {
      region = await readCounted(o, start, end)
    } catch (err) {
      problems.push(toProblem(err, 'summary', `${key} byte ${start}`))
      return undefined
    }
    try {
      summary = decodeSummary(region.subarray(layout.summaryOffset - start, layout.summaryEnd - start), {
        count: header.dataCount,
        summaryCrc: header.summaryCrc,
        where: url,
      })
    } catch (err) {
      problems.push(toProblem(err, 'summary', `${key} byte ${layout.summaryOffset}`))
    }
    const pad = paddingNotZero(region, start, layout)
    if (pad >= 0) {
      problems.push({
        code: 'ERR_CORRUPT',
        what: 'summary',
        where: `${key} byte ${pad}`,
        message: `${url}: padding byte ${pad} after the summary is not zero`,
      })
    }
    if (whole) {
      decodeMetaBlocks(region, start, header, layout, (j, at) => `${url} byte ${at} (meta block ${j})`, nodeProblem)
    }
  }
  if (!whole) {
    const mbs = layout.metaBlockSize
    const perChunk = Math.max(1, Math.floor(VERIFY_CHUNK / mbs))
    for (let first = 0; first < header.metaCount; first += perChunk) {
      const n = Math.min(perChunk, header.metaCount - first)
      const at0 = layout.metaOffset + first * mbs
      let bytes: Uint8Array
      try {
        bytes = await readCounted(o, at0, at0 + n * mbs)
      } catch (err) {
        problems.push(toProblem(err, 'node', `${key} byte ${at0}`))
        return undefined
      }
      // These n blocks as the meta blocks of an object whose meta region starts at at0.
      decodeMetaBlocks(
        bytes,
        at0,
        { ...header, metaCount: n },
        { ...layout, metaOffset: at0 },
        (j, at) => `${url} byte ${at} (meta block ${first + j})`,
        nodeProblem,
      )
    }
  }
  return { summary }
}

/** The block map's data pointers into the object must name live slots holding those very blocks. */
function checkDataPointers(o: ObjectCheck, summary: Summary, reached: Reached | undefined): void {
  const { key, url, header, layout } = o
  for (let i = 0; i < (reached?.dataAt.length ?? 0); i++) {
    const at = reached?.dataAt.get(i) as number
    const block = reached?.dataBlock.get(i) as number
    const slot = dataSlotAt(layout, at)
    let problem: string | undefined
    if (slot < 0) problem = `not one of its ${header.dataCount} data slots`
    else if (summary.blockIndex[slot] !== block) problem = `slot ${slot}, which holds block ${summary.blockIndex[slot]}`
    else if (summary.live[slot] !== 1) problem = `slot ${slot}, which is dead (block ${block} was written again)`
    if (problem !== undefined) {
      o.ctx.problems.push({
        code: 'ERR_CORRUPT',
        what: 'pointer',
        where: `${key} byte ${at}`,
        message: `${url}: the block map points block ${block} at byte ${at}, ${problem}`,
      })
    }
  }
}

/** Every data slot's CRC, dead ones too, VERIFY_CHUNK at a time. */
async function checkDataSlots(o: ObjectCheck, summary: Summary): Promise<void> {
  const { ctx, key, url, header, layout } = o
  const bs = layout.dataBlockSize
  const perChunk = Math.max(1, Math.floor(VERIFY_CHUNK / bs))
  for (let first = 0; first < header.dataCount; first += perChunk) {
    const n = Math.min(perChunk, header.dataCount - first)
    const start = layout.dataOffset + first * bs
    // As the store's GET gives them (64 KiB buffers on S3 and the directory store).
    let bytes: Uint8Array[]
    try {
      bytes = await readExactChunks(ctx.store, key, start, start + n * bs, ctx.options.signal)
      counted(ctx, n * bs)
    } catch (err) {
      ctx.problems.push(toProblem(err, 'block', `${key} byte ${start}`))
      return
    }
    ctx.report.slots += checkSlotCrcs(bytes, first, summary, bs, (slot, computed) => {
      const at = layout.dataOffset + slot * bs
      ctx.problems.push({
        code: 'ERR_CORRUPT',
        what: 'block',
        where: `${key} byte ${at}`,
        message: slotCrcMessage(url, summary, slot, computed, at),
      })
    })
    givePieces(bytes) // checked: the store's pieces can be read into again
  }
}
