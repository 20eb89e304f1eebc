/**
 * The cleaner: which checkpoints a container keeps, and deleting what none of them
 * reaches (mark and sweep, ARCHITECTURE §2).
 *
 * - Retained: the published checkpoint always; the `keep` newest of the published history
 *   (it and the checkpoints it was built on: keptHeaders); every cno in `keepCnos`; every complete checkpoint younger than
 *   `keepNewerThanMs` (its part 0's age); every checkpoint superseded less than
 *   `graceMs` ago (see supersededLately); and every complete checkpoint built on the
 *   published inode, or on one such, which a writer opening the container rolls forward
 *   to (rollForwardCandidates). The others are dropped.
 * - Mark: each retained checkpoint's block map is walked once from its inode (a subtree
 *   already walked for another checkpoint is not walked again when reached at the same
 *   level within a key range that holds the earlier one; reached otherwise, it is walked
 *   and checked again, so a pointer back up the tree is a problem); what it reaches, and its
 *   own part 0, is live. A map that cannot be walked whole (a node missing or corrupt)
 *   stops the cleaner before anything is deleted: what it would delete is not known. A
 *   checkpoint retained only for having been superseded lately (or as a roll-forward
 *   candidate) is the exception: a run with a shorter grace period may have deleted some
 *   of its objects, so one whose map cannot be walked whole, or that reaches an object not
 *   listed, is logged and told as dropped, and what it reaches stays live.
 * - Sweep: a segment object is garbage when nothing retained reaches it and it is older
 *   than `graceMs` (so a live writer's objects, sent ahead or in a flush, are never
 *   touched); that covers dropped checkpoints, abandoned attempts (parts without a
 *   part 0) and complete checkpoints never published nor to be. The objects and uploads
 *   of one number that nothing retained reaches are as old as the newest of them
 *   (attemptAges): a writer sending ahead for longer than `graceMs` keeps what it sent,
 *   under a number another writer has published since too. A number between the
 *   published one and a kept roll-forward candidate keeps all its objects, whatever their
 *   age (they go in a run after the candidate is published or superseded). A writer
 *   looks past a number no object uses (container/listing.ts numbersTaken), so it does
 *   not need them to reach the candidate; a writer of an earlier version of this library
 *   stops at such a number and takes it for its own checkpoint, and for it an emptied
 *   number would leave the candidate unpublished for good. Part 0s go first, in
 *   batches of their own, so no checkpoint is ever openable without its data parts. Open
 *   multipart uploads under segment keys older than the grace period are aborted.
 * - Refused, nothing deleted (ERR_CORRUPT): an `inode` object that differs from the inode
 *   in its checkpoint's part 0 (or names one with no part 0), and no `inode` object with
 *   complete checkpoints and none pinned (every one of them would go).
 * - Beside a live writer: the inode is read before the listing (a checkpoint published
 *   between the two is then listed), and again after the mark and before anything is
 *   deleted; when it has moved to a checkpoint the mark did not retain, nothing is
 *   deleted (`stopped` says why). The objects to delete above the published number are
 *   listed again just before the deletions, and only those still as first listed go
 *   (dropRelisted): another run may have deleted them, and a writer taken their number
 *   again. The inode itself, and keys that are not segment keys, are never touched.
 * - On a directory store, a run that did not stop then sweeps what crashed writers left
 *   (sweepStoreLeftovers), as removeContainer does: the sidecar of an object whose
 *   replacement or deletion a crash cut short is left by every other sweep, and no store
 *   call ever reaches it.
 */
import debug from 'debug'
import { readInode, sameInode } from '../container/inode.js'
import {
  abortUpload,
  type ContainerListing,
  deleteSegments,
  listContainer,
  listOpenUploads,
  objectsFrom,
} from '../container/listing.js'
import { readObjectHeader } from '../container/object-header.js'
import { isSignal, StreamSegmentError, throwIfAborted } from '../errors.js'
import type { Inode } from '../format/inode.js'
import { INODE_KEY, parseKey, segmentKey } from '../format/names.js'
import { MAX_CNO } from '../format/pointer.js'
import { checkOptionNames, givenOr as or } from '../settings.js'
import { storeNow } from '../store/common.js'
import { sweepStoreLeftovers } from '../store/directory.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { MultipartUpload, ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { printableLog } from '../util/shell-words.js'
import { asError, showValue } from '../util/typed-arrays.js'
import { isUnreadable, type MapToWalk, type NodePlace, type Problem, problemCount, walkMaps } from './map-walk.js'

const log = printableLog(debug('stream-segment:gc'))
const HOUR_MS = 3_600_000

export interface GcOptions {
  /** The newest complete checkpoints to keep, the published one among them (default 1, at least 1). */
  keep?: number
  /** Checkpoints kept whatever their age. */
  keepCnos?: readonly number[]
  /** Complete checkpoints younger than this are kept too (default 0: none by age). */
  keepNewerThanMs?: number
  /**
   * Objects and uploads younger than this are never deleted, and checkpoints superseded
   * less than this ago are kept (default 1 hour).
   */
  graceMs?: number
  /** Says what would go, deletes nothing. */
  dryRun?: boolean
  /**
   * Objects of checkpoints numbered this or above are never deleted, whatever their age:
   * a writer cleaning its own container spares the checkpoint it is building.
   */
  spareFromCno?: number
  signal?: AbortSignal
  /**
   * Called as the work goes: after each kept checkpoint's map is walked (`mark`), then
   * after each batch of deletions (`delete`; not in a dry run).
   */
  onProgress?: (progress: GcProgress) => void
}

/** How far a gc has come: kept maps walked, then objects deleted, of how many. */
export interface GcProgress {
  phase: 'mark' | 'delete'
  walkedCheckpoints: number
  /** Nodes of the kept maps walked so far (told after each level of them), each shared node once. */
  walkedNodes: number
  keptCheckpoints: number
  deletedObjects: number
  objectsToDelete: number
}

export interface GcResult {
  url: string
  /** The checkpoint published when the cleaner started (0: none). */
  published: number
  /** Complete checkpoints kept and dropped, by cno. */
  kept: number[]
  dropped: number[]
  /** Segment objects deleted (or, dry, that would be), their keys and bytes. */
  deletedObjects: number
  deletedBytes: number
  deletedKeys: string[]
  /** Open multipart uploads aborted (or that would be). */
  abortedUploads: number
  /**
   * Garbage not deleted this time because it is younger than the grace period: objects no
   * kept checkpoint reaches, their bytes, and open uploads. A run after they have aged
   * deletes them.
   */
  youngObjects: number
  youngBytes: number
  youngUploads: number
  /**
   * Numbers between the published checkpoint and a kept one a writer rolls forward to
   * whose objects no kept checkpoint reaches (an abandoned attempt, a dropped checkpoint),
   * and those objects and their bytes: kept whatever their age, so that a roll-forward
   * that stops at the first number no object uses (an earlier version's; this one's looks
   * past it) reaches that checkpoint. A run after it is published (or superseded) deletes
   * them.
   */
  heldCnos: number[]
  heldObjects: number
  heldBytes: number
  /** The grace period this run used, ms. */
  graceMs: number
  /** Bytes of segment objects still stored afterwards. */
  storedBytes: number
  dryRun: boolean
  /** Set when the cleaner stopped before deleting anything, and why. */
  stopped?: string
}

function checkOptions(o: GcOptions): Required<Omit<GcOptions, 'signal' | 'onProgress'>> {
  const bad = (name: string, v: unknown, want: string) =>
    StreamSegmentError.invalidArgument(`gc: ${name} = ${showValue(v)}: ${want}; nothing was deleted`)
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw bad('options', o, 'must be an object')
  checkOptionNames('gc', o, [
    'keep',
    'keepCnos',
    'keepNewerThanMs',
    'graceMs',
    'dryRun',
    'spareFromCno',
    'signal',
    'onProgress',
  ])
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') {
    throw bad('onProgress', typeof o.onProgress, 'must be a function')
  }
  const signal: unknown = o.signal
  if (signal !== undefined && !isSignal(signal)) {
    throw bad('signal', typeof signal === 'object' ? 'an object' : signal, 'must be an AbortSignal')
  }
  const nat = (name: string, v: unknown, min: number) => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) throw bad(name, v, `must be an integer ≥ ${min}`)
    return v
  }
  const keepCnos = or(o.keepCnos, [])
  if (!Array.isArray(keepCnos)) throw bad('keepCnos', keepCnos, 'must be a list of checkpoint numbers')
  // A number past the last a key can carry is a mistake, not a checkpoint that is missing.
  for (const c of keepCnos) {
    if (nat('keepCnos', c, 1) > MAX_CNO) throw bad('keepCnos', c, `must be a checkpoint number (1..${MAX_CNO})`)
  }
  if (o.dryRun !== undefined && typeof o.dryRun !== 'boolean') throw bad('dryRun', o.dryRun, 'must be true or false')
  return {
    keep: nat('keep', or(o.keep, 1), 1),
    keepCnos,
    keepNewerThanMs: nat('keepNewerThanMs', or(o.keepNewerThanMs, 0), 0),
    graceMs: nat('graceMs', or(o.graceMs, HOUR_MS), 0),
    dryRun: or(o.dryRun, false),
    spareFromCno: nat('spareFromCno', or(o.spareFromCno, Number.MAX_SAFE_INTEGER), 1),
  }
}

/**
 * Runs the cleaner on the container at `where` (see the top comment).
 * A store rejection that is no Error (a store outside the contract) is ERR_STORE naming
 * the call and the container (asError).
 */
export async function gc(where: StoreLocation | ObjectStore, options: GcOptions = {}): Promise<GcResult> {
  const o = checkOptions(options)
  const store = storeAt(where, 'gc')
  return await gcOf(store, options, o).catch((err) => {
    throw asError(err, () => `gc of ${store.url}`)
  })
}

async function gcOf(store: ObjectStore, options: GcOptions, o: ReturnType<typeof checkOptions>): Promise<GcResult> {
  const { signal } = options
  throwIfAborted(signal, `gc of ${store.url}`)
  // The commit point first, then the listing: a checkpoint published between the two is in
  // the listing (kept below as one a writer rolls forward, or caught by the second look at
  // the inode). Listed first, a publication in between hid the published part 0 from the
  // walk of the checkpoints superseded lately, and they were dropped.
  const first = await readInode(store, { withEtag: true, signal }).catch((err: unknown) => {
    if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return undefined
    throw err
  })
  const listing = await listContainer(store, signal)
  const published = first?.inode.cno ?? 0
  // Ages by the clock that dates the objects (the store's, which its answers so far have
  // told): by this machine's, a clock hours ahead made a live writer's objects old enough
  // to delete, and its checkpoint was then published without them.
  const now = await storeNow(store)

  // Which complete checkpoints are kept, and their inodes.
  const format = first?.inode.format
  const { complete, retained, upToPublished } = retention(store.url, listing, published, o, now)
  const headers = await keptHeaders({ store, listing, retained, upToPublished, keep: o.keep, complete, format, signal })
  const byRule = new Set(retained)
  const inodes = new Map([...headers].map(([cno, h]) => [cno, h.inode]))
  // The commit point must be the one its part 0 holds (as verify checks): the mark walks the
  // inode object's root, and a root damaged there alone would leave live objects unmarked.
  if (first !== undefined) await checkPublished(store, first.inode, inodes.get(published), signal)
  // Checkpoints superseded within the grace period, kept too, their inodes the bases
  // their successors name.
  const pending = new Set<number>()
  const lately = await supersededLately({
    store,
    listing,
    published,
    headers,
    complete,
    graceMs: o.graceMs,
    now,
    format,
    signal,
  })
  for (const [cno, inode] of lately) {
    if (retained.has(cno)) continue
    retained.add(cno)
    inodes.set(cno, inode)
  }
  // Complete checkpoints built on the published inode (or on one of them): a writer that
  // opens the container rolls the inode forward to them (container/inode.ts, rollForward),
  // maybe while this runs, so they are kept; swept, the roll-forward would publish a
  // checkpoint whose objects are gone.
  const next =
    first === undefined
      ? new Map<number, Inode>()
      : await rollForwardCandidates({ store, listing, complete, format, signal }, first.inode)
  for (const [cno, inode] of next) {
    if (retained.has(cno)) continue
    retained.add(cno)
    pending.add(cno)
    inodes.set(cno, inode)
  }

  // Nothing published (no inode object) and nothing pinned: every checkpoint would go.
  if (retained.size === 0 && complete.size > 0) {
    throw StreamSegmentError.corrupt(
      `${store.url}: gc: no ${INODE_KEY} object, so no checkpoint is published and none would be kept, yet ${complete.size} are complete (${[...complete.keys()].sort((a, b) => a - b).join(', ')}); nothing was deleted`,
    )
  }
  const progress: GcProgress = {
    phase: 'mark',
    walkedCheckpoints: 0,
    walkedNodes: 0,
    keptCheckpoints: retained.size,
    deletedObjects: 0,
    objectsToDelete: 0,
  }
  const tell = () => options.onProgress?.({ ...progress })
  const { live, broken } = await mark(
    store,
    retained,
    (cno) => (cno === published && first !== undefined ? first.inode : (inodes.get(cno) as Inode)),
    (cno) => (lately.has(cno) || pending.has(cno)) && !byRule.has(cno),
    (key) => listing.sizes.has(key),
    signal,
    {
      walked: () => {
        progress.walkedCheckpoints++
        tell()
      },
      // Maps walked together end together: between, each level walked tells how far.
      level: (nodes) => {
        progress.walkedNodes += nodes
        if (nodes > 0) tell()
      },
    },
  )

  // What would go: unreached and past the grace period; part 0s first.
  const old = (ms: number | undefined) => ms !== undefined && now - ms >= o.graceMs
  const spared = (key: string) => {
    const k = parseKey(key)
    return k?.kind === 'segment' && k.cno >= o.spareFromCno
  }
  const open = (await listOpenUploads(store, signal)).filter((u) => !spared(u.key))
  const unreached = [...listing.sizes.keys()].filter((key) => !live.has(key) && !spared(key))
  const ageOf = attemptAges(listing, unreached, open)
  // A roll-forward of an earlier version of this library goes up from the published number
  // only while objects use the numbers, and its writer takes the first unused one for
  // itself: a number below a candidate emptied, such a writer stops there, the candidate
  // is never published and a later run deletes it as unreached (this version's looks past
  // it: listing.ts numbersTaken). So every number between the published one and the
  // highest candidate that can still be rolled forward keeps all its objects (an abandoned
  // attempt, a dropped checkpoint, the placeholder of an open upload) until that candidate
  // is published or superseded; a run after that deletes them.
  const rollsTo = [...next.keys()].filter((c) => !broken.has(c)).reduce((a, b) => Math.max(a, b), 0)
  const numberOf = (key: string) => {
    const k = parseKey(key)
    return k?.kind === 'segment' ? k.cno : 0
  }
  const bridging = (key: string) => numberOf(key) > published && numberOf(key) < rollsTo
  const held = unreached.filter(bridging)
  if (held.length > 0)
    log('%s: %d objects kept below checkpoint %d, which a writer rolls forward to', store.url, held.length, rollsTo)
  const sweepable = unreached.filter((key) => !bridging(key))
  const garbage = sweepable.filter((key) => old(ageOf(key, listing.modified.get(key)))).sort(part0First)
  const young = sweepable.filter((key) => !old(ageOf(key, listing.modified.get(key))))
  const uploads = open.filter((u) => old(ageOf(u.key, u.initiatedMs)))
  const result: GcResult = {
    url: store.url,
    published,
    // A checkpoint kept only as superseded lately (or for a roll-forward) found incomplete is told as dropped.
    kept: [...retained].filter((c) => !broken.has(c)).sort((a, b) => a - b),
    dropped: [...complete.keys()].filter((c) => !retained.has(c) || broken.has(c)).sort((a, b) => a - b),
    deletedObjects: garbage.length,
    deletedBytes: garbage.reduce((n, k) => n + (listing.sizes.get(k) ?? 0), 0),
    deletedKeys: garbage,
    abortedUploads: uploads.length,
    youngObjects: young.length,
    youngBytes: young.reduce((n, k) => n + (listing.sizes.get(k) ?? 0), 0),
    youngUploads: open.length - uploads.length,
    heldCnos: [...new Set(held.map(numberOf))].sort((a, b) => a - b),
    heldObjects: held.length,
    heldBytes: held.reduce((n, k) => n + (listing.sizes.get(k) ?? 0), 0),
    graceMs: o.graceMs,
    storedBytes: 0,
    dryRun: o.dryRun,
  }
  let stored = 0
  for (const size of listing.sizes.values()) stored += size
  result.storedBytes = o.dryRun ? stored : stored - result.deletedBytes
  if (o.dryRun) return result
  if (garbage.length === 0 && uploads.length === 0) {
    await sweepStoreLeftovers(store)
    return result
  }

  // Beside a live writer: the commit point must not have moved past what the mark kept.
  if (first !== undefined || listing.hasInode) {
    const now2 = await readInode(store, { withEtag: true, signal })
    if (now2.etag !== first?.etag && !retained.has(now2.inode.cno)) {
      return stop(result, stored, `the inode moved to checkpoint ${now2.inode.cno} during the mark`)
    }
  }
  // Another run may have deleted what this one listed above the published number, and a
  // writer opened since may have taken that number again: only what is still as listed goes.
  await dropRelisted(store, listing, garbage, published, signal)
  result.deletedObjects = garbage.length
  result.deletedBytes = garbage.reduce((n, k) => n + (listing.sizes.get(k) ?? 0), 0)
  result.deletedKeys = garbage
  result.storedBytes = stored - result.deletedBytes
  log(
    '%s: deleting %d objects (%d bytes), aborting %d uploads',
    store.url,
    garbage.length,
    result.deletedBytes,
    uploads.length,
  )
  Object.assign(progress, { phase: 'delete', objectsToDelete: garbage.length })
  tell()
  let aborted = 0
  try {
    await deleteSegments(store, garbage, signal, (n) => {
      progress.deletedObjects = n
      tell()
    })
    for (const u of uploads) {
      await abortUpload(store, u, signal)
      aborted++
    }
  } catch (err) {
    throw partly(store.url, err, progress.deletedObjects, garbage.length, aborted, uploads.length)
  }
  await sweepStoreLeftovers(store)
  return result
}

/**
 * Takes out of `garbage` (in place) the keys of numbers above `published` that a listing
 * taken now no longer shows as the first listing did (the same ETag and time): deleted
 * since (by another run), or stored again. A number's objects gone, and none above it
 * used, a writer opening the container takes that number for its next checkpoint
 * (listing.ts firstFreeCno), and its objects have the keys the first listing had; deleted
 * by that listing, its flush would fail (or its checkpoint lose them). Numbers up to the
 * published one are never taken again. One LIST of the keys above the published number,
 * just before the deletions, and the keys it kept first among the part 0s and among the
 * other parts: what is left is the time between that LIST and their batch.
 */
async function dropRelisted(
  store: ObjectStore,
  listing: ContainerListing,
  garbage: string[],
  published: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const above = (key: string) => {
    const k = parseKey(key)
    return k?.kind === 'segment' && k.cno > published
  }
  if (!garbage.some(above)) return
  const now = await objectsFrom(store, published + 1, signal)
  const same = (key: string) => {
    const o = now.get(key)
    return o !== undefined && o.etag === listing.etags.get(key) && o.lastModifiedMs === listing.modified.get(key)
  }
  // Part 0s first still, and the keys above first among each: what is left of the window is
  // the time from this listing to their batch, not to the end of all the others.
  const first = (key: string) => (isPart0Key(key) ? 0 : 2) + (above(key) ? 0 : 1)
  const kept = garbage.filter((key) => !above(key) || same(key))
  kept.sort((a, b) => first(a) - first(b) || (a < b ? -1 : a > b ? 1 : 0))
  if (kept.length < garbage.length) {
    log(
      '%s: %d objects listed above checkpoint %d changed or went since the listing: not deleted',
      store.url,
      garbage.length - kept.length,
      published,
    )
  }
  garbage.splice(0, garbage.length, ...kept)
}

/**
 * A failure (or an interrupt) part-way through the deletions, said with how far they
 * came: the batch that failed may have deleted some of its keys too. What is left is
 * garbage still, for the next run.
 */
function partly(
  url: string,
  thrown: unknown,
  deleted: number,
  toDelete: number,
  aborted: number,
  toAbort: number,
): unknown {
  // One that is no Error is said as one, with how far the deletions came.
  const failure = asError(thrown, () => `gc of ${url}`)
  if (!StreamSegmentError.is(failure)) return failure
  const done =
    deleted < toDelete
      ? `deleted ${deleted} of the ${toDelete} objects it found to delete (part 0s first; some of the batch that failed may be gone too) and aborted none of the ${toAbort} uploads`
      : `deleted the ${toDelete} objects it found to delete and aborted ${aborted} of the ${toAbort} uploads`
  return new StreamSegmentError(
    failure.code,
    `${url}: gc: ${done}, then: ${failure.message}; a later gc deletes the rest`,
    {
      cause: failure,
    },
  )
}

/**
 * When an object or upload counts as written, for the grace period: what no kept
 * checkpoint reaches under one checkpoint number (`unreached`, and the open `uploads`) is
 * an attempt, a writer's checkpoint in progress or one abandoned, and each of its objects
 * and uploads counts as new as the newest of them. A writer that has been sending ahead
 * for longer than the grace period (a slow stream) keeps adding to its attempt, so none of
 * it goes; an abandoned one goes whole once its last object has aged. The number may have
 * a part 0 all the same: two writers take the same next number, and the one that publishes
 * first leaves the other sending ahead under a complete checkpoint's number (until its
 * flush meets the conflict); a dropped checkpoint's objects go once its part 0, written
 * last, has aged.
 */
function attemptAges(
  listing: ContainerListing,
  unreached: readonly string[],
  uploads: readonly MultipartUpload[],
): (key: string, ms: number | undefined) => number | undefined {
  const newest = new Map<number, number>()
  const seen = (key: string, ms: number | undefined) => {
    const k = parseKey(key)
    if (k?.kind !== 'segment' || ms === undefined) return
    newest.set(k.cno, Math.max(newest.get(k.cno) ?? ms, ms))
  }
  for (const key of unreached) seen(key, listing.modified.get(key))
  for (const u of uploads) seen(u.key, u.initiatedMs)
  return (key, ms) => {
    const k = parseKey(key)
    const attempt = k?.kind === 'segment' ? newest.get(k.cno) : undefined
    return attempt ?? ms
  }
}

/**
 * Complete checkpoints (those with a part 0) and their ages, from the listing; those kept
 * by the rules the listing decides (the published one, `keepCnos`, `keepNewerThanMs`); and
 * the complete ones up to the published one, newest first, among which `keep` chooses
 * (keptHeaders).
 */
function retention(
  url: string,
  listing: ContainerListing,
  published: number,
  o: Required<Omit<GcOptions, 'signal' | 'onProgress'>>,
  now: number,
): { complete: Map<number, { modifiedMs: number }>; retained: Set<number>; upToPublished: number[] } {
  const complete = new Map<number, { modifiedMs: number }>()
  for (const [cno, c] of listing.byCno) {
    if (c.parts.includes(0)) complete.set(cno, { modifiedMs: listing.modified.get(segmentKey(cno, 0)) ?? now })
  }
  for (const c of o.keepCnos) {
    if (!complete.has(c)) {
      throw StreamSegmentError.notFound(
        `${url}: gc: keepCnos names checkpoint ${c}, which has no part 0; nothing was deleted`,
      )
    }
  }
  const upToPublished = [...complete.keys()].filter((c) => c <= published).sort((a, b) => b - a)
  const retained = new Set<number>()
  if (published > 0) retained.add(published)
  for (const c of o.keepCnos) retained.add(c)
  for (const [cno, c] of complete)
    if (o.keepNewerThanMs > 0 && now - c.modifiedMs < o.keepNewerThanMs) retained.add(cno)
  return { complete, retained, upToPublished }
}

/** What gc takes from a part 0's header: the checkpoint's inode, and the one it was built on. */
interface PartZero {
  inode: Inode
  baseInode: Inode
}

/** Where readPartZeros reads part 0 headers: the listing's complete checkpoints, in `format`. */
interface PartZeroSource {
  store: ObjectStore
  listing: ContainerListing
  complete: ReadonlyMap<number, unknown>
  format: number | undefined
  signal: AbortSignal | undefined
}

/** What keptHeaders reads from: the checkpoints kept so far, and those `keep` chooses among. */
interface KeptChoice extends PartZeroSource {
  /** Kept by the other rules; those `keep` chooses are added. */
  retained: Set<number>
  /** The complete checkpoints up to the published one, newest first. */
  upToPublished: readonly number[]
  keep: number
}

/**
 * The checkpoints `keep` chooses, added to `retained`, and the inodes of every kept one,
 * with their bases, from their part 0s: a dropped one's part 0 is not needed (one that
 * fails its checks is garbage like the rest of its checkpoint). A kept one that cannot be
 * read stops the cleaner.
 *
 * `keep` counts the published checkpoint and those it was built on, newest first: each
 * part 0 names the inode it was built on, the checkpoint it replaced. A complete
 * checkpoint below the published one that is not on that chain was never published (a
 * writer that lost a conflict stored its part 0, then published its view again under a
 * later number) and does not count: it took the place of the previous published one.
 * Where the chain ends early (a part 0 an earlier run deleted), the newest of the others
 * fill the count. The part 0s of the `keep` newest are read together with the other kept
 * ones, so the chain is known in one round trip unless such checkpoints lie on it.
 */
async function keptHeaders(choice: KeptChoice): Promise<Map<number, PartZero>> {
  const { store, retained, upToPublished, keep, complete } = choice
  const read = await readPartZeros(choice, new Set([...retained, ...upToPublished.slice(0, keep)]))
  const history: number[] = []
  for (let cno = upToPublished[0]; cno !== undefined && history.length < keep; ) {
    history.push(cno)
    if (history.length === keep) break
    let h = read.get(cno)
    if (h === undefined) {
      h = (await readPartZeros(choice, new Set([cno]))).get(cno) as PartZero | { failed: unknown }
      read.set(cno, h)
    }
    if ('failed' in h) break // it is kept: its failure stops the cleaner below
    const base = h.baseInode.cno
    cno = base > 0 && base < cno && complete.has(base) ? base : undefined
  }
  const chosen = new Set(history)
  for (const c of upToPublished) {
    if (chosen.size >= keep) break
    chosen.add(c)
  }
  for (const c of chosen) retained.add(c)
  const missing = [...retained].filter((c) => complete.has(c) && !read.has(c))
  for (const [cno, h] of await readPartZeros(choice, new Set(missing))) read.set(cno, h)
  const headers = new Map<number, PartZero>()
  for (const cno of retained) {
    const h = read.get(cno)
    if (h === undefined) continue // the published number without a part 0: checkPublished says so
    if ('failed' in h) {
      const err = h.failed
      if (!StreamSegmentError.is(err)) throw err
      throw new StreamSegmentError(
        err.code,
        `${store.url}: gc: checkpoint ${cno}, which is kept, cannot be read (${err.message}); nothing was deleted`,
        { cause: err },
      )
    }
    headers.set(cno, h)
  }
  return headers
}

/**
 * The part 0 headers of the complete checkpoints among `cnos`, eight at a time: each the
 * checkpoint's inode and base, or the error reading it gave (which stops the cleaner only
 * if that checkpoint is kept).
 */
async function readPartZeros(
  from: PartZeroSource,
  cnos: Iterable<number>,
): Promise<Map<number, PartZero | { failed: unknown }>> {
  const { store, listing, complete, format, signal } = from
  const out = new Map<number, PartZero | { failed: unknown }>()
  const limiter = new Limiter(8)
  await Promise.all(
    [...cnos]
      .filter((cno) => complete.has(cno))
      .map((cno) =>
        limiter.run(async () => {
          try {
            const size = listing.sizes.get(segmentKey(cno, 0))
            const { header } = await readObjectHeader(store, cno, 0, { format, size, signal })
            out.set(cno, { inode: header.inode, baseInode: header.baseInode })
          } catch (err) {
            out.set(cno, { failed: err })
          }
        }),
      ),
  )
  return out
}

/** What walking the chain of checkpoints superseded within the grace period reads from. */
interface GraceChain extends PartZeroSource {
  /** The published checkpoint, where the chain starts. */
  published: number
  /** The part 0s already read (those kept by a rule). */
  headers: ReadonlyMap<number, PartZero>
  graceMs: number
  now: number
}

/**
 * The checkpoints superseded less than `graceMs` ago, with their inodes. A writer opened
 * on a checkpoint while it was published builds on that checkpoint's objects until it
 * publishes, and on a conflict (`conflictPolicy: 'retry'`) it publishes its whole view —
 * that checkpoint plus its own writes — so those objects must last as long as its own
 * objects in flight do: the grace period, counted from when the checkpoint stopped being
 * the published one. The published checkpoints form a chain, each part 0 naming the inode
 * it was built on, which is the one it replaced (the inode write is a compare-and-swap; a
 * roll-forward publishes only a part 0 built on the inode published then); so checkpoint
 * b was superseded when its successor s in the chain was published: for the published
 * checkpoint, when the inode object was written; for an older s, when its part 0 was
 * written, just before. (A rolled-forward s was published later, when a writer opened the
 * container at least `rollForwardAfterMs` after its part 0; the inode object tells when,
 * so a roll-forward just now keeps b. Once s is superseded in turn, its part 0's time is
 * all the store keeps.) The chain is walked back from the published checkpoint while that
 * time is within `graceMs`: part 0s are older and older down the chain (each was written
 * after its base was published), so the first old one ends it; the part 0s it may read
 * are read beforehand, a bounded number at a time (basesWithinGrace), so a long chain
 * costs a few round trips, not one a link. Complete checkpoints never published are not in the chain: no writer
 * opened on them. A part 0 read here that fails its checks ends the walk (logged): the
 * checkpoint it names is kept all the same, from the inode its successor names.
 */
async function supersededLately(chain: GraceChain): Promise<Map<number, Inode>> {
  const { store, listing, published, headers, complete, graceMs, now } = chain
  const bases = await basesWithinGrace(chain)
  const lately = new Map<number, Inode>()
  let s = published
  while (s > 0) {
    const key = segmentKey(s, 0)
    let at = listing.modified.get(key)
    const inodeAt = listing.inodeModifiedMs
    if (at !== undefined && s === published && inodeAt !== undefined) at = Math.max(at, inodeAt)
    if (at === undefined || now - at >= graceMs) break // what s replaced was superseded before the grace period
    const base = headers.get(s)?.baseInode ?? bases.get(s)
    if (base === undefined) throw StreamSegmentError.internal(`gc: checkpoint ${s}'s part 0 was not read`)
    if ('failed' in base) {
      // A part 0 gone or damaged ends the walk; a failing store stops the cleaner.
      if (!isUnreadable(base.failed)) throw base.failed
      log(
        '%s: checkpoint %d: its part 0 cannot be read (%s); older ones are not kept as superseded lately',
        store.url,
        s,
        base.failed.message,
      )
      break
    }
    // The first checkpoint's base is the NULL inode (cno 0); a base whose part 0 an earlier
    // run deleted was dropped then, and the older ones with it.
    if (base.cno === 0 || base.cno >= s || !complete.has(base.cno)) break
    lately.set(base.cno, base)
    s = base.cno
  }
  return lately
}

/**
 * The bases named by the part 0s supersededLately may walk through, read a bounded number
 * at a time rather than one link after another: those of the complete checkpoints up to
 * the published one whose part 0 the listing dates within the grace period (every link
 * the walk reads is one), but for those already read. A part 0 that cannot be read is
 * its error, which matters only if the walk reaches it.
 */
async function basesWithinGrace(chain: GraceChain): Promise<Map<number, Inode | { failed: unknown }>> {
  const { listing, published, headers, complete, graceMs, now } = chain
  const recent = (cno: number) => {
    const at = listing.modified.get(segmentKey(cno, 0))
    return at !== undefined && now - at < graceMs
  }
  const cnos = [...complete.keys()].filter((c) => c <= published && !headers.has(c) && recent(c))
  const read = await readPartZeros(chain, cnos)
  return new Map([...read].map(([cno, h]) => [cno, 'failed' in h ? h : h.baseInode]))
}

/**
 * The complete checkpoints above the published one whose part 0 was built on the published
 * inode, or on one of those below it, with their inodes: those a writer opening the
 * container would roll forward to (a roll-forward goes on from each checkpoint it
 * publishes to one built on it, in number order; container/inode.ts rollForward). A part 0
 * that cannot be read is not one (a writer checks it before it rolls forward). They are
 * read a bounded number at a time, not one after another.
 */
async function rollForwardCandidates(from: PartZeroSource, published: Inode): Promise<Map<number, Inode>> {
  const above = [...from.complete.keys()].filter((c) => c > published.cno).sort((a, b) => a - b)
  const read = await readPartZeros(from, above)
  const out = new Map<number, Inode>()
  const onChain = (base: Inode) => {
    const below = base.cno === published.cno ? published : out.get(base.cno)
    return below !== undefined && sameInode(base, below)
  }
  for (const cno of above) {
    const h = read.get(cno) as PartZero | { failed: unknown }
    if ('failed' in h) {
      if (!isUnreadable(h.failed)) throw h.failed
      log(
        '%s: checkpoint %d above the published one cannot be read (%s): not kept',
        from.store.url,
        cno,
        h.failed.message,
      )
    } else if (onChain(h.baseInode)) {
      out.set(cno, h.inode)
    }
  }
  return out
}

/**
 * Mark: the keys every kept checkpoint reaches, its part 0 among them, each map walked
 * once (a subtree walked for another checkpoint is not walked again when reached at the
 * same level within a range that holds the earlier one). A map that cannot be walked
 * whole stops the cleaner: what it would delete is not known.
 */
async function mark(
  store: ObjectStore,
  retained: ReadonlySet<number>,
  inodeOf: (cno: number) => Inode,
  onlyLately: (cno: number) => boolean,
  listed: (key: string) => boolean,
  signal: AbortSignal | undefined,
  told: { walked: () => void; level: (nodes: number) => void },
): Promise<{ live: Set<string>; broken: Set<number> }> {
  const live = new Set<string>()
  const broken = new Set<number>()
  const seen = new Map<string, NodePlace>()
  const problems: Problem[] = []
  // Those kept by a rule first, so every node they reach is walked and checked for them
  // (a node missing for a checkpoint kept only as superseded lately would be in `seen`).
  const newestFirst = [...retained].sort((a, b) => b - a)
  // The maps of each group walked together, a level at a time across them (walkMaps), so
  // a remote store is waited for about once per level, not once per level per map.
  for (const group of [newestFirst.filter((c) => !onlyLately(c)), newestFirst.filter(onlyLately)]) {
    // Kept only as superseded lately (or for a roll-forward): a map or data objects an
    // earlier run with a shorter grace period left incomplete do not stop the cleaner;
    // what it reaches stays, the checkpoint is broken. The claims in `seen` on what failed
    // (a node, or a leaf pointing into an object gone) go back (walkMaps), so that every
    // other map walks for itself what it reaches through them, and finds that too.
    const maps: MapToWalk[] = group.map((cno) => ({ inode: inodeOf(cno), problems: [] }))
    const gone = (key: string) => !listed(key)
    // Which objects each map reaches is all mark needs (objectsOnly): recording each data
    // pointer would hold 8 bytes per mapped block, gigabytes for a checkpoint of a few TiB.
    const share = { seen, gone, onLevel: told.level, objectsOnly: true }
    await walkMaps(store, maps, signal, share, (i, walk, again) => {
      const cno = group[i] as number
      const own = (maps[i] as MapToWalk).problems
      live.add(segmentKey(cno, 0))
      for (const key of walk.reached.keys()) live.add(key)
      if (!again) told.walked()
      if (onlyLately(cno)) {
        // Its nodes may all be there and a data object gone all the same.
        const lost = [...walk.reached.keys()].filter(gone)
        // Told once, though a map may be walked again (walkMaps).
        if ((own.length > 0 || lost.length > 0) && !broken.has(cno)) {
          broken.add(cno)
          log(
            '%s: checkpoint %d, kept only as superseded lately or for a roll-forward, is incomplete: dropped, what it reaches kept (%d problems, first: %s; %d objects it reaches not listed, first: %s)',
            store.url,
            cno,
            own.length,
            own[0]?.message,
            lost.length,
            lost[0],
          )
        }
      }
    })
    // Those kept by a rule stop the cleaner, their problems told map by map, newest first.
    for (const [i, cno] of group.entries()) {
      if (!onlyLately(cno)) for (const p of (maps[i] as MapToWalk).problems) problems.push(p)
    }
  }
  if (problems.length > 0) {
    throw StreamSegmentError.corrupt(
      `${store.url}: gc: a kept checkpoint's block map cannot be walked whole (${problemCount(problems)} problems, first: ${problems[0]?.message}); nothing was deleted`,
    )
  }
  return { live, broken }
}

/**
 * ERR_CORRUPT unless the published inode is the one in its checkpoint's part 0 (`part0`,
 * from the listing; read here when the listing predates it, as beside a writer).
 */
async function checkPublished(
  store: ObjectStore,
  published: Inode,
  part0: Inode | undefined,
  signal: AbortSignal | undefined,
): Promise<void> {
  const fail = (why: string, todo = '') =>
    StreamSegmentError.corrupt(
      `${store.url}/${INODE_KEY}: gc: names checkpoint ${published.cno}, ${why}; nothing was deleted${todo}`,
    )
  let inode = part0
  if (inode === undefined) {
    const key = segmentKey(published.cno, 0)
    try {
      inode = (await readObjectHeader(store, published.cno, 0, { signal })).header.inode
    } catch (err) {
      // rm deletes part 0s first and the inode last: one stopped part-way leaves this.
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND'))
        throw fail(
          `which has no part 0 (${key})`,
          ': if an rm of the container was stopped, run rm again to finish removing it; otherwise restore that object',
        )
      throw err
    }
  }
  if (!sameInode(published, inode)) throw fail('but differs from the inode in its part 0')
}

/** Orders segment keys with part 0s first (so no checkpoint is left openable without its data), then by key. */
export function part0First(a: string, b: string): number {
  const rank = (key: string) => (isPart0Key(key) ? 0 : 1)
  return rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0)
}

function isPart0Key(key: string): boolean {
  return parseKey(key)?.kind === 'segment' && key.endsWith('.0')
}

function stop(result: GcResult, stored: number, why: string): GcResult {
  log('%s: stopped, nothing deleted: %s', result.url, why)
  return {
    ...result,
    deletedObjects: 0,
    deletedBytes: 0,
    deletedKeys: [],
    abortedUploads: 0,
    storedBytes: stored,
    stopped: why,
  }
}
