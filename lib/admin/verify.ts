/**
 * `verify`: every header, summary, node and data block CRC reachable from one
 * checkpoint, and every pointer of its block map (a leaf's must name a live slot holding
 * that very block, a node's a meta block of its object). Every byte of those objects is
 * read, 16 MiB at a time. What it finds is returned as problems, each with what and
 * where; it throws only when it cannot start (no container, no such checkpoint) or the
 * store itself fails.
 *
 * What it holds grows with the map's nodes and the objects it reaches, not with its data
 * pointers (2^28 of them for 1 TiB in 4 KiB blocks): the map is walked for its objects
 * only (WalkShare.objectsOnly), and each leaf's data pointers are checked as the walk
 * visits it (WalkShare.onLeaf), against the summaries of the objects they point into
 * (ObjectChecks). An object a leaf points into has its own checks started then, so its
 * summary is read once for both; summaries are held while their object is checked, then
 * in a cache of SUMMARY_CACHE_BYTES, least recently used out first. A leaf pointing into
 * an object whose summary went reads that summary again (one GET, counted in bytesRead):
 * in a file written in order, its leaves point into objects checked just before, so it
 * takes no more requests than checking each pointer after the walk did.
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
import { pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
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
  type LeafEntries,
  type MapWalk,
  missingWhy,
  newProblem,
  nodePointerProblems,
  ObjectProblems,
  type Problem,
  toProblem,
  walkMap,
} from './map-walk.js'

/** Data read per GET while verifying. */
const VERIFY_CHUNK = 16 * MiB

/**
 * Bytes of summaries kept for the leaves' pointer checks once their objects were checked
 * (a summary takes 9 bytes a slot: 2.25 MiB for an object of 1 GiB in 4 KiB blocks).
 */
const SUMMARY_CACHE_BYTES = 64 * MiB

/** Test hook: options carrying it (a number of bytes) keep summaries within that in place of SUMMARY_CACHE_BYTES. */
export const SUMMARY_BUDGET: unique symbol = Symbol('stream-segment: verify summary budget')

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

/** A report with nothing counted yet. */
function newReport(url: string, cno: number, problems: Problem[]): VerifyReport {
  return { url, cno, objects: 0, nodes: 0, dataPointers: 0, placeholders: 0, slots: 0, bytesRead: 0, problems }
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
  const report = newReport(store.url, inode.cno, problems)
  const ctx = { store, inode, part0, report, options, startedMs: Date.now() }
  const budget = (options as { [SUMMARY_BUDGET]?: number })[SUMMARY_BUDGET] ?? SUMMARY_CACHE_BYTES
  const checks = new ObjectChecks(ctx, budget, {
    size: (key) => listing.sizes.get(key),
    pointers: (key) => listing.sizes.has(key),
    slots: () => true,
  })
  const walk = await checks.walk(problems, {})
  report.nodes = walk.nodes
  report.dataPointers = walk.dataPointers
  await checks.finish(objectKeys(listing, inode.cno, walk), walk, (found) => {
    report.objects++
    problems.push(...found)
  })
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
  const report = newReport(store.url, inode.cno, problems)
  const part0 = segmentKey(inode.cno, 0)
  const isNew = (key: string) => (parseKey(key) as { cno: number }).cno > publishedCno
  const ctx = { store, inode, part0: undefined, report, options: { signal }, startedMs: Date.now() }
  const checks = new ObjectChecks(ctx, SUMMARY_CACHE_BYTES, {
    size: (key) => sizes.get(key)?.size,
    // The pointers into the objects of older numbers were checked when those were published.
    pointers: (key) => isNew(key) && sizes.has(key),
    slots: (key) => key === part0,
  })
  const walk = await checks.walk(problems, { newerThan: publishedCno })
  const keys = new Set([...walk.reached.keys()].filter(isNew))
  keys.add(part0)
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
          problems.push(
            newProblem({
              code: 'ERR_NOT_FOUND',
              what: 'missing',
              where: key,
              message: `${store.url}/${key}: no such object, but checkpoint ${inode.cno} points into it`,
            }),
          )
        }
      }),
    ),
  )
  // Its first problems kept, the rest counted, as verifyCheckpoint keeps them.
  await checks.finish([...keys].sort(), walk, (found) => {
    for (const p of found) problems.push(p)
  })
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
 * What a verification checks of each object the block map reaches (or that is listed
 * under the checkpoint's number): `size` as listed (undefined: not listed); `pointers`,
 * whether the leaves' data pointers into it are checked; `slots`, whether its data slots are.
 */
interface WhatToCheck {
  size(key: string): number | undefined
  pointers(key: string): boolean
  slots(key: string): boolean
}

/**
 * What is kept of an object whose header and meta region were read, for the pointers into
 * it: where its slots and summary lie (not its whole header: the roots of two inodes).
 */
interface Checked {
  key: string
  url: string
  layout: ObjectLayout
  dataCount: number
  summaryCrc: number
  /** Whether its summary checked out. */
  summary: boolean
}

/**
 * One object's checks (ObjectChecks.#start), its problems kept apart by kind so that
 * finish gives them in the order the checks run, whenever each was found.
 */
interface ObjectState {
  /**
   * Its header and meta region read and checked: what is kept of it; undefined when its
   * checks ended there (or never began: stopped).
   */
  head: Promise<Checked | undefined>
  /** The whole of its own checks (slots included) done. */
  done: Promise<void>
  /** Its summary while its data slots are checked (then in the cache, if it fits). */
  pinned: Summary | undefined
  /** Problems of its header and meta region, of the leaves' pointers into it, of its data slots. */
  own: ObjectProblems
  pointers: ObjectProblems
  slots: ObjectProblems
}

/** What a summary is taken to hold in the cache: its three arrays (9 bytes a slot) and their objects. */
function summaryBytes(s: Summary): number {
  return s.blockIndex.byteLength + s.live.byteLength + s.crc.byteLength + 256
}

/**
 * The objects of one verification, each checked once (4 at a time), and the leaves' data
 * pointers, each checked against its object's summary as the walk visits the leaf. An
 * object a leaf points into is begun then, its header and meta region read (the summary
 * among them) before the leaf is checked; the others once the walk is done (finish),
 * which gives every object's problems in the order its checks run: its header and meta
 * region, the node pointers into it (the walk whole), the data pointers into it, its
 * data slots. Held per object until finish is done with it: where its slots and summary
 * lie (Checked) and the problems kept of it, never its pointers. Summaries are held while
 * their object is checked, then, until the walk is done, up to `budget` bytes of them,
 * least recently used out first; one gone when a leaf needs it is read again (and kept
 * again).
 */
class ObjectChecks {
  readonly #states = new Map<string, ObjectState>()
  /** Summaries kept, least recently used first. */
  readonly #cache = new Map<string, Summary>()
  #cachedBytes = 0
  readonly #reading = new Map<string, Promise<Summary | undefined>>()
  readonly #limiter = new Limiter(4)
  /** The walk failed: objects not begun are not begun. */
  #stopped = false
  /** The walk is done: no summary is kept for a leaf. */
  #walked = false

  constructor(
    private readonly ctx: Omit<VerifyContext, 'problems'>,
    private readonly budget: number,
    private readonly what: WhatToCheck,
  ) {}

  /**
   * Walks the map (its problems into `problems`), for its objects only, checking each
   * leaf's data pointers as it comes.
   */
  async walk(problems: Problem[], share: { newerThan?: number }): Promise<MapWalk> {
    const { store, inode, options } = this.ctx
    const onLeaf = (leaf: LeafEntries) => this.#leaf(leaf)
    try {
      return await walkMap(store, inode, problems, options.signal, { ...share, objectsOnly: true, onLeaf })
    } catch (err) {
      this.#stopped = true
      throw err
    }
  }

  /**
   * Every object of `keys` checked (those a leaf began, waited for), its problems given to
   * `onObject` (the first kept, the rest counted, as ObjectProblems keeps them).
   */
  async finish(keys: readonly string[], walk: MapWalk, onObject: (problems: Problem[]) => void): Promise<void> {
    // No leaf is checked any more: no summary is needed after its object's own checks.
    this.#walked = true
    this.#cache.clear()
    this.#cachedBytes = 0
    await Promise.all(
      keys.map(async (key) => {
        const found = new ObjectProblems(this.ctx.store.url, key)
        await this.#finishObject(key, walk, found)
        this.#states.delete(key)
        onObject(found.done())
      }),
    )
  }

  async #finishObject(key: string, walk: MapWalk, found: ObjectProblems): Promise<void> {
    const { ctx } = this
    const reached = walk.reached.get(key)
    // The walk reported it (and may have found it gone after the listing saw it): what a
    // leaf's check of it found is not reported again.
    if (walk.missing.has(key)) {
      await this.#states.get(key)?.done
      return
    }
    const size = this.what.size(key)
    if (size === undefined) {
      found.push(
        newProblem({
          code: 'ERR_NOT_FOUND',
          what: 'missing',
          where: key,
          message: `${ctx.store.url}/${key}: ${missingWhy(ctx.inode, key, reached)}`,
        }),
      )
      return
    }
    // An empty object the block map does not reach is the claim of a multipart upload that
    // never completed (an abandoned attempt at this number): not part of the checkpoint.
    if (size === 0 && reached === undefined && (parseKey(key) as { part: number }).part !== 0) {
      ctx.report.placeholders++
      return
    }
    const s = this.#start(key, size)
    const head = await s.head
    found.add(s.own)
    if (head !== undefined) {
      // The block map's node pointers into the object must name its meta blocks.
      for (const p of nodePointerProblems(head.url, key, head.layout, reached)) found.push(p)
    }
    await s.done
    if (head?.summary !== true) return
    found.add(s.pointers)
    found.add(s.slots)
  }

  /**
   * Object `key`'s checks, begun now if not yet: its header (against the listed size), meta
   * blocks and summary, then every data slot's CRC (`slots`). A region that cannot be read
   * ends them there. The checks are format/object.ts's, as decodeObject runs them on a
   * whole object.
   */
  #start(key: string, size: number): ObjectState {
    const known = this.#states.get(key)
    if (known !== undefined) return known
    const { url } = this.ctx.store
    let told: (head: Checked | undefined) => void = () => {}
    let failed: (err: unknown) => void = () => {}
    const s: ObjectState = {
      head: new Promise((resolve, reject) => {
        told = resolve
        failed = reject
      }),
      done: Promise.resolve(),
      pinned: undefined,
      own: new ObjectProblems(url, key),
      pointers: new ObjectProblems(url, key),
      slots: new ObjectProblems(url, key),
    }
    this.#states.set(key, s)
    s.done = this.#limiter.run(async () => {
      try {
        if (this.#stopped) return
        const o = await checkHeader({ ...this.ctx, problems: s.own }, key, size)
        if (o === undefined) return
        const meta = await checkMetaRegion(o)
        if (meta === undefined) return
        const { summary } = meta
        s.pinned = summary
        const { dataCount, summaryCrc } = o.header
        told({ key, url: o.url, layout: o.layout, dataCount, summaryCrc, summary: summary !== undefined })
        if (summary === undefined) return
        if (this.what.slots(key)) await checkDataSlots({ ...o, ctx: { ...o.ctx, problems: s.slots } }, summary)
        this.#keep(key, summary)
      } catch (err) {
        failed(err)
        throw err
      } finally {
        s.pinned = undefined
        told(undefined) // no-op when told already
      }
    })
    // Waited for by finish, or by a leaf's check; until then, a failure is no unhandled rejection.
    s.head.catch(() => {})
    s.done.catch(() => {})
    return s
  }

  /** A leaf's data pointers, each against the summary of its object, a run into one object at a time. */
  #leaf(e: LeafEntries): Promise<void> | undefined {
    let checked = false
    for (let i = 0; i < e.count && !checked; i++) {
      const hi = e.hi[i] as number
      const lo = e.lo[i] as number
      if ((hi !== 0 || lo !== 0) && this.what.pointers(segmentKey(hi, pointerPart(lo)))) checked = true
    }
    return checked ? this.#checkLeaf(e) : undefined
  }

  async #checkLeaf(e: LeafEntries): Promise<void> {
    for (let i = 0; i < e.count; ) {
      const hi = e.hi[i] as number
      const lo = e.lo[i] as number
      if (hi === 0 && lo === 0) {
        i++
        continue
      }
      // The run of pointers into this object.
      const part = pointerPart(lo)
      let end = i + 1
      while (end < e.count && e.hi[end] === hi && pointerPart(e.lo[end] as number) === part) end++
      const key = segmentKey(hi, part)
      const size = this.what.size(key)
      if (size !== undefined && this.what.pointers(key)) {
        const s = this.#start(key, size)
        const head = await s.head
        const summary = head?.summary === true ? await this.#summaryOf(s, head) : undefined
        if (head !== undefined && summary !== undefined) {
          for (let j = i; j < end; j++) {
            const p = pointerProblem(head, summary, pointerUnit(e.lo[j] as number) * UNIT_BYTES, e.keys[j] as number)
            if (p !== undefined) s.pointers.push(p)
          }
        }
      }
      i = end
    }
  }

  /** Object `key`'s summary, which checked out: held, kept, or read again. */
  async #summaryOf(s: ObjectState, c: Checked): Promise<Summary | undefined> {
    const { key } = c
    if (s.pinned !== undefined) return s.pinned
    const kept = this.#cache.get(key)
    if (kept !== undefined) {
      // Used last now.
      this.#cache.delete(key)
      this.#cache.set(key, kept)
      return kept
    }
    let reading = this.#reading.get(key)
    if (reading === undefined) {
      reading = this.#readSummary(s, c).finally(() => this.#reading.delete(key))
      this.#reading.set(key, reading)
    }
    return await reading
  }

  /** The summary of an object checked before, read again (a problem of its own if it no longer checks out). */
  async #readSummary(s: ObjectState, c: Checked): Promise<Summary | undefined> {
    const { key, url, layout, dataCount, summaryCrc } = c
    const at = layout.summaryOffset
    let summary: Summary
    try {
      let bytes: Uint8Array = new Uint8Array(0)
      if (layout.summaryEnd > at) {
        bytes = await readExact(this.ctx.store, key, at, layout.summaryEnd, this.ctx.options.signal)
        counted(this.ctx, bytes.byteLength)
      }
      summary = decodeSummary(bytes, { count: dataCount, summaryCrc, where: url })
    } catch (err) {
      s.own.push(toProblem(err, 'summary', `${key} byte ${at}`))
      return undefined
    }
    this.#keep(key, summary)
    return summary
  }

  /** Keeps `summary` (used last), letting go of those used least recently beyond the budget. */
  #keep(key: string, summary: Summary): void {
    const bytes = summaryBytes(summary)
    if (this.#walked || bytes > this.budget || this.#cache.has(key)) return
    this.#cache.set(key, summary)
    this.#cachedBytes += bytes
    for (const [k, old] of this.#cache) {
      if (this.#cachedBytes <= this.budget) break
      this.#cache.delete(k)
      this.#cachedBytes -= summaryBytes(old)
    }
  }
}

/** Reads [start, end) of the object, counted as read. */
async function readCounted(o: ObjectCheck, start: number, end: number): Promise<Uint8Array> {
  const b = await readExact(o.ctx.store, o.key, start, end, o.ctx.options.signal)
  counted(o.ctx, b.byteLength)
  return b
}

function counted(ctx: Pick<VerifyContext, 'report' | 'options'>, n: number): void {
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
    problems.push(
      newProblem({
        code: 'ERR_NOT_FOUND',
        what: 'header',
        where: key,
        message: `${store.url}/${key}: its header names a container made at ${at(header.inode.ctimeMs)}, not this one (made at ${at(inode.ctimeMs)}; checkpoint ${inode.cno} written at ${at(inode.mtimeMs)}): readers take it for an object of a container made again here and fail with ERR_NOT_FOUND`,
      }),
    )
    return undefined
  }
  if (k.part === 0 && k.cno === inode.cno && ctx.part0 === undefined && !sameInode(header.inode, inode)) {
    problems.push(
      newProblem({
        code: 'ERR_CORRUPT',
        what: 'inode',
        where: INODE_KEY,
        message: `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, but differs from the inode in its part 0 (${key})`,
      }),
    )
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
      problems.push(
        newProblem({
          code: 'ERR_CORRUPT',
          what: 'summary',
          where: `${key} byte ${pad}`,
          message: `${url}: padding byte ${pad} after the summary is not zero`,
        }),
      )
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

/** A data pointer of the block map, of block `block` at byte `at` of the object: a problem unless it names a live slot holding that very block. */
function pointerProblem(c: Checked, summary: Summary, at: number, block: number): Problem | undefined {
  const { key, url, layout } = c
  const slot = dataSlotAt(layout, at)
  let problem: string | undefined
  if (slot < 0) problem = `not one of its ${c.dataCount} data slots`
  else if (summary.blockIndex[slot] !== block) problem = `slot ${slot}, which holds block ${summary.blockIndex[slot]}`
  else if (summary.live[slot] !== 1) problem = `slot ${slot}, which is dead (block ${block} was written again)`
  if (problem === undefined) return undefined
  return newProblem({
    code: 'ERR_CORRUPT',
    what: 'pointer',
    where: `${key} byte ${at}`,
    message: `${url}: the block map points block ${block} at byte ${at}, ${problem}`,
  })
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
      ctx.problems.push(
        newProblem({
          code: 'ERR_CORRUPT',
          what: 'block',
          where: `${key} byte ${at}`,
          message: slotCrcMessage(url, summary, slot, computed, at),
        }),
      )
    })
    givePieces(bytes) // checked: the store's pieces can be read into again
  }
}
