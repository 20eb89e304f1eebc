/**
 * `inspect`: every object of one checkpoint — those its block map reaches and its own
 * parts — with its header, counts and dead slots, from one listing and one walk of the
 * map, of objects only (its data pointers counted per object, none recorded). Objects
 * that cannot be read are reported, not thrown, the checkpoint's own entry (the inode
 * object, or its part 0 when named by number) too, as `verify` reports them. An empty
 * claim of an upload that never completed, under the checkpoint's number, is listed as
 * such, not read.
 */

import { type ContainerListing, listContainer } from '../container/listing.js'
import { readObjectHeader } from '../container/object-header.js'
import { readExact } from '../container/objects.js'
import { throwIfAborted } from '../errors.js'
import {
  FLAG_CHECKPOINT,
  FLAG_PARTIAL,
  FLAG_SENT_AHEAD,
  formatName,
  type Header,
  objectLayout,
} from '../format/header.js'
import type { Inode } from '../format/inode.js'
import { parseKey, segmentKey } from '../format/names.js'
import { hex32 } from '../format/pointer.js'
import { decodeSummary, type Summary } from '../format/summary.js'
import { checkCallOptions } from '../settings.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { asError } from '../util/typed-arrays.js'
import { checkPublished, resolveOrReport } from './list.js'
import {
  type MapWalk,
  missingWhy,
  newProblem,
  nodePointerProblems,
  ObjectProblems,
  type Problem,
  toProblem,
  walkMap,
} from './map-walk.js'

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
  /**
   * An empty object the map does not reach, under a part number above 0: the claim of a
   * multipart upload that never completed (an object given up), not part of the
   * checkpoint and no problem (verify skips it too).
   */
  placeholder?: true
  error?: string
}

export interface InspectReport {
  url: string
  /** The checkpoint inspected (0: the published one, when the inode object cannot be read). */
  cno: number
  /**
   * Whether the `inode` object names it (false when there is none); absent when that is not
   * known: the inode object, or the checkpoint, cannot be read (`problems` say why).
   */
  published?: boolean
  /**
   * Why the checkpoint cannot be read — its entry, the inode object or (named by number)
   * its part 0, damaged or of a newer layout — as its problem says: the report then holds
   * nothing else (format 'unknown', size −1, block sizes and times 0, an empty tree, no
   * objects).
   */
  error?: string
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

/**
 * The objects of the keys the map reaches, plus the checkpoint's own parts, in key order.
 * Its part 0 always, listed or not: it is the checkpoint itself (the writers and the
 * cleaner refuse a container without it), and a map that reaches nothing in it (a
 * checkpoint that only changed the size) must not let it go missing unseen.
 */
export function objectKeys(listing: ContainerListing, cno: number, walk: MapWalk): string[] {
  const keys = new Set(walk.reached.keys())
  keys.add(segmentKey(cno, 0))
  for (const part of listing.byCno.get(cno)?.parts ?? []) keys.add(segmentKey(cno, part))
  return [...keys].sort()
}

/**
 * Every object of checkpoint `cno` (default: the published one): headers, counts, dead slots.
 * A store rejection that is no Error (a store outside the contract) is ERR_STORE naming
 * the call and the container (asError).
 */
export async function inspectCheckpoint(
  where: StoreLocation | ObjectStore,
  options: { cno?: number; signal?: AbortSignal } = {},
): Promise<InspectReport> {
  const store = storeAt(where, 'inspectCheckpoint')
  return await inspectOf(store, options).catch((err) => {
    throw asError(err, () => `inspectCheckpoint of ${store.url}`)
  })
}

async function inspectOf(store: ObjectStore, options: { cno?: number; signal?: AbortSignal }): Promise<InspectReport> {
  checkCallOptions('inspectCheckpoint', options, ['cno', 'signal'])
  const { signal } = options
  throwIfAborted(signal, `inspectCheckpoint of ${store.url}`)
  const listing = await listContainer(store, signal)
  const problems: Problem[] = []
  const resolved = await resolveOrReport(store, listing, options.cno, problems, signal)
  if (resolved === undefined) return unreadable(store.url, options.cno ?? 0, problems)
  const { inode } = resolved
  const published = await checkPublished(store, listing, inode, options.cno, problems, signal)
  // Counts per object are all the report shows (Reached.blocks): recording each data
  // pointer would hold 8 bytes per mapped block, gigabytes for a checkpoint of a few TiB.
  const walk = await walkMap(store, inode, problems, signal, { objectsOnly: true })
  const walked = problemsByObject(problems)
  const limiter = new Limiter(8)
  const objects = await Promise.all(
    objectKeys(listing, inode.cno, walk).map((key) =>
      limiter.run(() => inspectObject(store, inode, key, { listing, walk, problems, walked }, signal)),
    ),
  )
  return {
    url: store.url,
    cno: inode.cno,
    ...(published === undefined ? {} : { published }),
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

/** A problem's object (the key its `where` starts with) and message, as one string. */
function objectProblem(key: string, message: string): string {
  return `${key}\n${message}`
}

/**
 * The problems found so far, by object and message: each object's check looks its own up
 * here, not through every problem (objects × problems on a map damaged throughout).
 */
function problemsByObject(problems: readonly Problem[]): Set<string> {
  return new Set(problems.map((p) => objectProblem(p.where.split(' ')[0] as string, p.message)))
}

/** The report on a checkpoint whose entry cannot be read: its problem, and nothing else known. */
function unreadable(url: string, cno: number, problems: Problem[]): InspectReport {
  return {
    url,
    cno,
    error: (problems[0] as Problem).message,
    format: 'unknown',
    size: -1,
    dataBlockSize: 0,
    metaBlockSize: 0,
    ctimeMs: 0,
    mtimeMs: 0,
    tree: { height: 0, nodes: 0, leaves: 0, dataPointers: 0, holes: 0 },
    objects: [],
    problems,
  }
}

async function readSummary(store: ObjectStore, key: string, h: Header, signal?: AbortSignal): Promise<Summary> {
  const layout = objectLayout(h, h)
  const bytes = await readExact(store, key, layout.summaryOffset, layout.summaryEnd, signal)
  return decodeSummary(bytes, { count: h.dataCount, summaryCrc: h.summaryCrc, where: `${store.url}/${key}` })
}

/**
 * One object of the checkpoint: its size and what the map reaches in it, from the listing
 * and the walk; its header and live and dead slots, read. A header or summary that fails
 * its checks is the report's `error`, and a problem of the checkpoint (once per object:
 * not when `walked`, the problems found before the objects, holds it). Exported for the tests.
 */
export async function inspectObject(
  store: ObjectStore,
  inode: Inode,
  key: string,
  found: { listing: ContainerListing; walk: MapWalk; problems: Problem[]; walked: ReadonlySet<string> },
  signal: AbortSignal | undefined,
): Promise<ObjectReport> {
  const { listing, walk, problems, walked } = found
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
    reachedBlocks: reached?.blocks ?? 0,
  }
  if (size < 0 || walk.missing.has(key)) {
    report.error = 'missing'
    // A problem of the report, unless the walk met it already (a node in it).
    if (!walk.missing.has(key)) {
      problems.push(
        newProblem({
          code: 'ERR_NOT_FOUND',
          what: 'missing',
          where: key,
          message: `${store.url}/${key}: ${missingWhy(inode, key, reached)}`,
        }),
      )
    }
    return report
  }
  if (size === 0 && reached === undefined && k.part !== 0) {
    report.placeholder = true
    return report
  }
  // Its first problems kept, the rest counted, as verify keeps them.
  const mine = new ObjectProblems(store.url, key)
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
    for (const p of nodePointerProblems(`${store.url}/${key}`, key, objectLayout(h, h), reached)) mine.push(p)
    const s = await readSummary(store, key, h, signal)
    let live = 0
    for (let i = 0; i < s.count; i++) live += s.live[i] as number
    report.liveSlots = live
    report.deadSlots = s.count - live
  } catch (err) {
    const problem = toProblem(err, 'header', key)
    report.error = problem.message
    // A problem of the report, as the walk's are (once per object: the walk may have met it).
    if (!walked.has(objectProblem(key, problem.message))) mine.push(problem)
  }
  // One by one, not push(...): problems may already hold a million of the walk's.
  for (const p of mine.done()) problems.push(p)
  return report
}
