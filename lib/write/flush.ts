/**
 * Partial segments and checkpoints: how dirty data leaves for storage.
 *
 * Order of a flush, which is what makes a checkpoint all-or-nothing:
 *   1. every data part completes (dirty leaves with their blocks, packed into objects of
 *      at most segmentMaxObjectBytes; the leaves at the end of the file are kept for
 *      part 0 while they fit beside the index nodes);
 *   2. part 0 is written: the index nodes above the leaves, the leaves it kept, their
 *      data, and the checkpoint's inode, create-only;
 *   3. the `inode` object is replaced, If-Match the version this file is built on
 *      (If-None-Match: * for a new container, after one LIST that finds every object the
 *      checkpoint points into: see checkOwnObjects; later checkpoints
 *      check their own objects stored before part 0 the same way). Only this makes the checkpoint visible.
 * Every segment object is create-only: a key that exists already (an abandoned attempt,
 * or another writer on the same number) moves the checkpoint to a new number, and the
 * object is built again under it. A conflict at 3 means another writer published since
 * this file's state was read. With conflictPolicy 'fail' the flush throws ERR_CONFLICT
 * and keeps dirty everything part 0 held (data parts already stored stay valid and are
 * reused by the next attempt); the file then builds on the other writer's checkpoint, so
 * calling flush again publishes on top of it, as 'retry' does by itself. With 'retry' it reads the inode again and publishes under
 * a new number on top of it: the last writer wins, as with S3 PUT. A partial segment is
 * a data part written early under memory pressure; it publishes nothing.
 */
import debug from 'debug'
import { type Published, publishInode, reloadInode, sameInode, wasPublished } from '../container/inode.js'
import { checkpointKeys, deleteSegments, firstMissing, listCheckpoint } from '../container/listing.js'
import { readObjectHeader } from '../container/object-header.js'
import type { Uploadable } from '../container/uploader.js'
import { StreamSegmentError } from '../errors.js'
import { FLAG_CHECKPOINT, FLAG_PARTIAL } from '../format/header.js'
import type { Inode } from '../format/inode.js'
import { objectBytes } from '../format/layout.js'
import { segmentKey } from '../format/names.js'
import { MAX_PART, pointerPart } from '../format/pointer.js'
import type { MapNode } from '../state/block-map.js'
import type { FileState, Part0Ref } from '../state/file-state.js'
import { CLOCK_OFFSET_NOISE_MS } from '../store/common.js'
import { printableLog } from '../util/shell-words.js'
import { signalAfter } from '../util/signals.js'
import { isoTime } from '../util/time.js'
import { showValue } from '../util/typed-arrays.js'
import { growingLeaf, ObjectPlan } from './object-plan.js'

const log = printableLog(debug('stream-segment:flush'))

/** What a flush did (ARCHITECTURE §9). Times in milliseconds. */
export interface FlushTiming {
  /** The checkpoint published (the previous one when nothing changed). */
  cno: number
  /** Objects this checkpoint wrote: data parts (partials included) and part 0; 0 when nothing changed. */
  objects: number
  /** Bytes the flush itself uploaded (data parts, part 0, inode). */
  bytes: number
  /** Data blocks the flush itself wrote. */
  dataBlocks: number
  /** Block-map nodes the flush itself wrote. */
  metaBlocks: number
  totalMs: number
  /** Writing the data parts; part 0; the inode. */
  dataMs: number
  part0Ms: number
  inodeMs: number
  /** Publications retried after a conflict. */
  conflicts: number
  /** Requests the store made again after a failure that may pass, since the checkpoint began. */
  retries: number
  /**
   * The spec's counters, for the whole checkpoint: data bytes uploaded before the flush
   * (partial segments and objects sent ahead), data bytes that died before their object
   * counted (written again, or their object given up), data bytes the flush itself
   * wrote, and bytes of block-map nodes written.
   */
  streamSentBytes: number
  streamDeadBytes: number
  streamFlushBytes: number
  streamMetaBytes: number
  /**
   * Bytes of this checkpoint's objects that an interrupted upload had sent already and
   * that were kept instead of being sent again (uploadFile's resume); 0 otherwise.
   */
  reusedBytes: number
}

/** An object's bytes before any block: its header (and, head first, the padding it may need). */
function emptyObjectBytes(core: FileState): number {
  return objectBytes(0, 0, 1, 1, core.format)
}

function leafBytes(core: FileState, leaf: MapNode): number {
  return (
    objectBytes(leaf.dirtyCount, 1, core.blockSize, core.settings.metaBlockSize, core.format) - emptyObjectBytes(core)
  )
}

/** The size of a part 0 holding every dirty node given (and the root's own dirty blocks, a leaf root). */
function part0Size(
  core: FileState,
  rootLeaf: MapNode | undefined,
  dirty: { leaves: MapNode[]; index: MapNode[] },
): number {
  let blocks = rootLeaf?.dirtyCount ?? 0
  for (const leaf of dirty.leaves) blocks += leaf.dirtyCount
  return objectBytes(
    blocks,
    dirty.leaves.length + dirty.index.length,
    core.blockSize,
    core.settings.metaBlockSize,
    core.format,
  )
}

/** Packs leaves, in order, into groups whose objects fit `limit` bytes. */
function pack(core: FileState, leaves: readonly MapNode[], limit: number): MapNode[][] {
  const groups: MapNode[][] = []
  let group: MapNode[] = []
  let used = emptyObjectBytes(core)
  for (const leaf of leaves) {
    const b = leafBytes(core, leaf)
    if (group.length > 0 && used + b > limit) {
      groups.push(group)
      group = []
      used = emptyObjectBytes(core)
    }
    group.push(leaf)
    used += b
  }
  if (group.length > 0) groups.push(group)
  return groups
}

/**
 * Writes dirty leaves holding data as partial segments (data parts of the pending
 * checkpoint), one object at a time up to segmentMaxObjectBytes; the caller waits.
 * `holdBack`: but the leaf sequential writes still append to (object-plan.ts, growingLeaf).
 * Resolves to the number of objects stored.
 */
export async function writePartials(core: FileState, holdBack: boolean): Promise<number> {
  const hold = holdBack ? growingLeaf(core) : undefined
  const leaves = core.map.dirtyNodes().leaves.filter((l) => l.dirtyCount > 0 && l !== hold)
  const groups = pack(core, leaves, core.settings.segmentMaxObjectBytes)
  for (const group of groups) {
    const plan = await send(
      core,
      (cno, part) => new ObjectPlan(core.context(cno, part, FLAG_PARTIAL), core.tier, group),
    )
    const counters = core.counters
    counters.objects++
    counters.streamSentBytes += plan.dataBlocks * core.blockSize
    counters.streamMetaBytes += group.length * core.settings.metaBlockSize
    counters.streamDeadBytes += core.applyStored(plan)
    log('partial %s: %d blocks, %d leaves', plan.key, plan.dataBlocks, group.length)
  }
  return groups.length
}

const MAX_TAKEN_NUMBERS = 16
/** An ETag no inode has: a compare-and-swap against it always fails its condition. */
const SUPERSEDED = 'superseded-by-a-later-checkpoint'

/**
 * Uploads an object under a fresh (cno, part) — part 0 when `part0` — built by `make`.
 * A key that exists already belongs to an attempt abandoned before (a crash, a rolled
 * back writer) or to another writer on the same number: either way this checkpoint
 * moves to a new number and the object is built again under it. Whether the
 * checkpoint may be published is decided at the inode, not here.
 */
async function send(
  core: FileState,
  make: (cno: number, part: number) => ObjectPlan,
  part0 = false,
  halt?: Halt,
): Promise<ObjectPlan> {
  for (let attempt = 1; ; attempt++) {
    const { cno, part } = core.reserve(part0)
    const plan = make(cno, part)
    const answer = part0 ? answerAwaited(core) : undefined
    if (part0) part0Sent.set(plan, performance.now())
    try {
      await core.uploader.upload(halt === undefined ? plan : haltable(plan, halt), core.signal, answer?.signal)
      return plan
    } catch (err) {
      if (halt !== undefined && !StreamSegmentError.is(err, 'ERR_CONFLICT')) halt.failure ??= err
      plan.unplace()
      const taken = StreamSegmentError.is(err, 'ERR_CONFLICT')
      // A part 0 whose upload failed may have landed all the same (its answer lost, or cut
      // by an abort after the store had the request): left, it is a complete checkpoint
      // that the next writer to open the container rolls forward, though this flush failed
      // and the caller may roll its changes back. No inode write was sent for it: deleted.
      // A later attempt of this file under the same number builds it again (create-only:
      // a part 0 that could not be deleted moves it to a new number).
      // Past the call's deadline (ERR_TIMEOUT) there is no time left to delete: part 0 stays, as after a crash.
      const late = StreamSegmentError.is(err, 'ERR_TIMEOUT')
      if (part0 && (core.signal.aborted || (!taken && !late))) await dropPart0(core, part0Ref(plan), true)
      else if (part0 && late) leavePart0(core, plan)
      if (!taken || attempt >= MAX_TAKEN_NUMBERS) throw err
      log('%s exists: checkpoint %d moves to a new number', plan.key, cno)
      core.abandonCheckpoint()
    } finally {
      answer?.done()
    }
  }
}

/** Takes in an object the flush itself wrote: its blocks and nodes become stored. */
function record(core: FileState, timing: FlushTiming, plan: ObjectPlan): void {
  const counters = core.counters
  counters.objects++
  timing.bytes += plan.size
  timing.dataBlocks += plan.dataBlocks
  timing.metaBlocks += plan.images.length
  timing.streamFlushBytes += plan.dataBlocks * core.blockSize
  counters.streamMetaBytes += plan.images.length * core.settings.metaBlockSize
  counters.streamDeadBytes += core.applyStored(plan)
}

/** Publishes a checkpoint of everything written so far (a no-op when nothing changed). */
export async function flush(core: FileState): Promise<FlushTiming> {
  const t0 = performance.now()
  const counters = core.counters
  const timing: FlushTiming = {
    cno: core.published.cno,
    objects: 0,
    bytes: 0,
    dataBlocks: 0,
    metaBlocks: 0,
    totalMs: 0,
    dataMs: 0,
    part0Ms: 0,
    inodeMs: 0,
    conflicts: 0,
    retries: core.retries,
    streamSentBytes: counters.streamSentBytes,
    streamDeadBytes: counters.streamDeadBytes,
    streamFlushBytes: counters.streamFlushBytes,
    streamMetaBytes: counters.streamMetaBytes,
    reusedBytes: 0,
  }
  if (!core.changed) {
    timing.totalMs = performance.now() - t0
    return timing
  }
  for (;;) {
    const t1 = performance.now()
    const rootLeaf = await writeDataParts(core, timing)
    timing.dataMs += performance.now() - t1

    const t2 = performance.now()
    const part0 = await writePart0(core, rootLeaf)
    timing.part0Ms += performance.now() - t2

    const t3 = performance.now()
    const { cno, inode } = part0.ctx
    await verifySources(core, part0)
    await refuseIfAborted(core, part0)
    await checkOwnObjects(core, part0)
    let committed: Awaited<ReturnType<typeof commitInode>>
    try {
      committed = await commitInode(core, inode, timing)
    } catch (err) {
      part0.unplace() // stored, not published: its blocks stay dirty for the next attempt
      commitPointUnknown(core)
      throw err
    }
    if ('lost' in committed) {
      part0.unplace()
      await afterConflict(core, timing, cno, committed.lost, committed.now)
      continue
    }
    const { etag } = committed
    timing.inodeMs += performance.now() - t3
    record(core, timing, part0)
    core.map.root.dirty = false
    // The checkpoint's counters, complete now, before publish() starts the next one's.
    const done = core.counters
    timing.retries = core.retries
    core.publish(inode, etag)
    timing.cno = cno
    timing.objects = done.objects
    timing.streamSentBytes = done.streamSentBytes
    timing.streamDeadBytes = done.streamDeadBytes
    timing.streamMetaBytes = done.streamMetaBytes
    timing.totalMs = performance.now() - t0
    log('checkpoint %d: %d objects, %d bytes in %d ms', cno, timing.objects, timing.bytes, Math.round(timing.totalMs))
    return timing
  }
}

/** A checkpoint whose part 0 is built and goes to storage in the background (startPublish). */
export interface PublishInFlight {
  cno: number
  /** Resolves once the checkpoint is published; rejects when it was not (its changes stay dirty). */
  landed: Promise<FlushTiming>
}

/**
 * The background publish: a checkpoint of everything written so far as one object, part
 * 0, built now and uploaded, then published, in the background. What the caller awaits
 * (serialised with writes) is the build: every dirty leaf and index node planned into part
 * 0 and its bytes taken, the slots pinned, so the object keeps the bytes of this moment and
 * reads of them are served from those slots until it lands; writes from then on go to
 * fresh slots and build the next checkpoint (`detachCheckpoint`). When part 0 is stored and
 * the inode replaced, the blocks and nodes not changed since become stored; when either
 * fails, nothing is published and every change stays dirty for the next publish or flush.
 * A checkpoint that does not fit one object (segmentMaxObjectBytes) is refused: flush()
 * writes it in parts. So is one holding writes by reference (their sources are verified
 * before a flush publishes). Undefined when nothing changed.
 */
export async function startPublish(core: FileState): Promise<PublishInFlight | undefined> {
  const t0 = performance.now()
  if (!core.changed) return undefined
  if (core.sources.size > 0) {
    throw StreamSegmentError.state('publish: this checkpoint holds writes by reference; use flush()')
  }
  const s = core.settings
  const { leaves, index } = core.map.dirtyNodes()
  const root = core.map.root
  const rootLeaf = root.level === 0 && root.dirtyCount > 0 ? root : undefined
  const need = part0Size(core, rootLeaf, { leaves, index })
  if (need > s.segmentMaxObjectBytes) {
    throw StreamSegmentError.state(
      `publish: the checkpoint needs ${need} bytes as one object, over segmentMaxObjectBytes (${s.segmentMaxObjectBytes}); use flush(), which writes it in parts`,
    )
  }
  const cno = await freePart0(core)
  const plan = new ObjectPlan(core.context(cno, 0, FLAG_CHECKPOINT), core.tier, leaves, index, rootLeaf)
  const inode = checkpointInode(core, cno, plan)
  plan.ctx.inode = inode
  const whole = await plan.snapshot()
  const { counters, retries } = core.detachCheckpoint(cno)
  const timing: FlushTiming = {
    cno,
    objects: counters.objects + 1,
    bytes: 0,
    dataBlocks: plan.dataBlocks,
    metaBlocks: plan.images.length,
    totalMs: 0,
    dataMs: 0,
    part0Ms: 0,
    inodeMs: 0,
    conflicts: 0,
    retries,
    streamSentBytes: counters.streamSentBytes,
    streamDeadBytes: counters.streamDeadBytes,
    streamFlushBytes: counters.streamFlushBytes + plan.dataBlocks * core.blockSize,
    streamMetaBytes: counters.streamMetaBytes + plan.images.length * s.metaBlockSize,
    reusedBytes: 0,
  }
  let released = false
  const landed = (async () => {
    try {
      const t1 = performance.now()
      const answer = answerAwaited(core)
      part0Sent.set(plan, t1)
      await core.uploader
        .upload(whole.upload, core.signal, answer.signal)
        .catch(async (err: unknown) => {
          // As in send(): a part 0 that may have landed is deleted, unless the number was taken.
          const late = StreamSegmentError.is(err, 'ERR_TIMEOUT') // no time left to delete: see send()
          if (core.signal.aborted || (!StreamSegmentError.is(err, 'ERR_CONFLICT') && !late))
            await dropPart0(core, part0Ref(plan), true)
          else if (late) leavePart0(core, plan)
          throw err
        })
        .finally(() => answer.done())
      timing.bytes += plan.size
      timing.part0Ms = performance.now() - t1
      const t2 = performance.now()
      await refuseIfAborted(core, plan)
      await checkOwnObjects(core, plan)
      const committed = await commitInode(core, inode, timing).catch((err: unknown) => {
        commitPointUnknown(core)
        throw err
      })
      if ('lost' in committed) {
        timing.conflicts++
        // As a flush's conflict does: refused when the container was removed, made again, or
        // the base this file's map points into is gone (the file stays on its ETag then).
        await moveOnto(core, cno, committed.lost, committed.now)
        throw StreamSegmentError.conflict(
          `${core.store.url}: checkpoint ${cno} was not published: another writer got there first (${committed.lost.message}); its changes stay, and the next publish or flush puts them on top`,
          committed.lost,
        )
      }
      timing.inodeMs = performance.now() - t2
      released = true
      whole.release()
      timing.streamDeadBytes += core.applyStored(plan)
      core.landed(inode, committed.etag)
      settleRoot(core, inode)
      timing.totalMs = performance.now() - t0
      log('checkpoint %d published in the background: %d bytes in %d ms', cno, timing.bytes, Math.round(timing.totalMs))
      return timing
    } catch (err) {
      if (!released) whole.release()
      plan.unplace()
      log('checkpoint %d: background publish failed: %s', cno, (err as Error)?.message ?? err)
      throw err
    }
  })()
  return { cno, landed }
}

/**
 * The number of the checkpoint being built, moved on while an attempt abandoned before
 * (this writer's own that failed, or a dead writer's) holds its part 0: the background
 * publish cannot build part 0 again under another number once it is under way, as a flush
 * does. One LIST per number looked at. Another writer taking the number between this and
 * the upload still fails the publish (ERR_CONFLICT), its changes kept.
 */
async function freePart0(core: FileState): Promise<number> {
  for (let i = 1; ; i++) {
    const { cno } = core.reserve(true)
    const keys = await listCheckpoint(core.store, cno, core.signal)
    if (!keys.has(segmentKey(cno, 0))) return cno
    if (i >= MAX_TAKEN_NUMBERS) {
      throw StreamSegmentError.conflict(`${core.store.url}: checkpoints ${cno - i + 1} to ${cno} are all taken`)
    }
    log('%s exists: checkpoint %d moves to a new number', segmentKey(cno, 0), cno)
    core.abandonCheckpoint()
  }
}

/**
 * After a background publish landed: the root is clean only when nothing changed it
 * since part 0 was built (its entries are the inode's, no child and no block of it dirty).
 */
function settleRoot(core: FileState, inode: Inode): void {
  const root = core.map.root
  if (root.level !== inode.rootLevel || root.count !== inode.rootCount) return
  if (hasDirtyChild(root) || (root.level === 0 && root.dirtyCount > 0)) return
  for (let i = 0; i < root.count; i++) {
    if (root.keys[i] !== inode.rootKeys[i] || root.hi[i] !== inode.rootPtrHi[i] || root.lo[i] !== inode.rootPtrLo[i])
      return
  }
  root.dirty = false
}

/**
 * Phase 3: the `inode` object replaced, If-Match the version the file is built on. Resolves
 * to the new ETag, or to `lost` when another writer published first (with the commit point
 * as read again). A checkpoint another writer rolled forward (it opened the container
 * while part 0 was stored and the inode not yet) is published as built: ours.
 */
async function commitInode(
  core: FileState,
  inode: Inode,
  timing: FlushTiming,
): Promise<{ etag: string } | { lost: StreamSegmentError; now: Published | undefined }> {
  try {
    const put = await putInode(core, inode)
    timing.bytes += put.bytes
    return { etag: put.etag }
  } catch (err) {
    if (!StreamSegmentError.is(err, 'ERR_CONFLICT')) throw err
    // Whether it was published is still to be learnt: a stop now waits for that as for the
    // write's own answer (answerAwaited), or a checkpoint rolled forward would be reported
    // as aborted, not published.
    const answer = answerAwaited(core)
    try {
      const now = await reloadInode(core.store, answer.signal)
      const latest = now !== undefined && sameInode(now.inode, inode)
      if (now === undefined || !(latest || (await wasPublished(core.store, inode, now.inode, answer.signal)))) {
        return { lost: err, now }
      }
      log('checkpoint %d: published meanwhile by a writer that rolled it forward: ours', inode.cno)
      // Superseded already: the next flush with changes meets the newer one as a conflict.
      return { etag: latest ? (now.etag as string) : SUPERSEDED }
    } catch (e) {
      if (!answer.signal.aborted) throw e
      const unknown = StreamSegmentError.aborted(
        `${core.store.url}: checkpoint ${inode.cno}: aborted after its inode write failed its condition, before the inode read again answered within ${abortWaitMs(core)} ms: whether a writer rolled the checkpoint forward (published it) is unknown; its part 0 (${segmentKey(inode.cno, 0)}) is kept`,
        core.signal.reason,
      )
      unknownOutcomes.add(unknown)
      throw unknown
    } finally {
      answer.done()
    }
  }
}

/**
 * Phase 1, the data parts: every dirty leaf that part 0 has no room for, then index nodes
 * part 0 has no room for, level by level, children first. Returns the root when it is a
 * leaf holding dirty blocks (part 0 takes those).
 */
async function writeDataParts(core: FileState, timing: FlushTiming): Promise<MapNode | undefined> {
  const s = core.settings
  const limit = s.segmentMaxObjectBytes
  const { leaves, index } = core.map.dirtyNodes()
  const root = core.map.root
  const rootLeaf = root.level === 0 && root.dirtyCount > 0 ? root : undefined
  let part0Bytes = objectBytes(rootLeaf?.dirtyCount ?? 0, index.length, core.blockSize, s.metaBlockSize, core.format)
  // Leaves from `keep` on go in part 0 (the file's tail, while they fit beside the index
  // nodes); those before it in data parts.
  let keep = leaves.length
  while (keep > 0 && part0Bytes + leafBytes(core, leaves[keep - 1] as MapNode) <= limit) {
    part0Bytes += leafBytes(core, leaves[--keep] as MapNode)
  }
  await sendAll(
    core,
    timing,
    pack(core, leaves.slice(0, keep), limit).map(
      (g) => (cno: number, part: number) => new ObjectPlan(core.context(cno, part, 0), core.tier, g),
    ),
  )
  for (;;) {
    const rest = core.map.dirtyNodes()
    const need = part0Size(core, rootLeaf, rest)
    if (need <= limit) return rootLeaf
    const level = Math.min(...rest.index.map((n) => n.level))
    const ready = rest.index.filter((n) => n.level === level && !hasDirtyChild(n))
    if (ready.length === 0) {
      throw StreamSegmentError.internal(`part 0 needs ${need} bytes and no index node can be written before it`)
    }
    const perObject = Math.max(1, Math.floor((limit - emptyObjectBytes(core)) / s.metaBlockSize))
    const groups: MapNode[][] = []
    for (let i = 0; i < ready.length; i += perObject) groups.push(ready.slice(i, i + perObject))
    await sendAll(
      core,
      timing,
      groups.map((g) => (cno: number, part: number) => new ObjectPlan(core.context(cno, part, 0), core.tier, [], g)),
    )
  }
}

/** Phase 2, part 0: whatever is still dirty, with the checkpoint's inode. */
function writePart0(core: FileState, rootLeaf: MapNode | undefined): Promise<ObjectPlan> {
  const rest = core.map.dirtyNodes()
  return send(
    core,
    (cno) => {
      const plan = new ObjectPlan(core.context(cno, 0, FLAG_CHECKPOINT), core.tier, rest.leaves, rest.index, rootLeaf)
      plan.ctx.inode = checkpointInode(core, cno, plan)
      return plan
    },
    true,
  )
}

/**
 * Phase 3 failed its condition: another writer published first. Either way the file now
 * builds on what that writer published: a later flush (a retry here, or the caller's own
 * after 'fail') publishes on top of it.
 */
async function afterConflict(
  core: FileState,
  timing: FlushTiming,
  cno: number,
  err: StreamSegmentError,
  now: Published | undefined,
) {
  const s = core.settings
  timing.conflicts++
  log('checkpoint %d: conflict (%s), policy %s', cno, err.message, s.conflictPolicy)
  await moveOnto(core, cno, err, now)
  core.abandonCheckpoint()
  if (s.conflictPolicy === 'fail' || timing.conflicts > s.conflictRetries) {
    throw StreamSegmentError.conflict(
      `${core.store.url}: checkpoint ${cno} was not published: another writer got there first (${err.message})`,
      err,
    )
  }
}

/**
 * Checkpoint `cno` lost its inode write to another writer: the file moves onto `now`, the
 * commit point as read again, so that its next publication goes on top of it. Refused
 * (ERR_CONFLICT) when the container was removed meanwhile (`now` undefined), removed and
 * made again, or the base the file's block map points into is gone: the file keeps the
 * ETag it had, so a later flush or publish meets the same conflict.
 */
async function moveOnto(
  core: FileState,
  cno: number,
  err: StreamSegmentError,
  now: Published | undefined,
): Promise<void> {
  if (now === undefined) {
    // Publishing again (If-None-Match) would make a new container whose block map points
    // into the removed one's objects.
    throw StreamSegmentError.conflict(
      `${core.store.url}: checkpoint ${cno} was not published: the container's inode is gone (the container was removed meanwhile); this handle publishes nothing more: open the container again`,
      err,
    )
  }
  refuseRemade(core, cno, now, err)
  await checkBase(core, cno, now)
  core.republished(now)
}

/**
 * A conflict with the checkpoint of another container at this place (one made again since
 * this file's was removed: its creation time differs): this file's block map points into
 * the removed container's objects, whose names the new one's objects may hold. Publishing
 * on top would make a checkpoint that reads the new container's bytes as this file's; it
 * is refused, and the file stays on its ETag, so that a later flush meets the same
 * conflict. A file that has published nothing and was built on nothing (it lost the race
 * to create the container) has no such pointers: its view goes on top.
 */
function refuseRemade(core: FileState, cno: number, now: Published, err: StreamSegmentError): void {
  if (core.published.cno === 0 || now.inode.ctimeMs === core.ctimeMs) return
  throw StreamSegmentError.conflict(
    `${core.store.url}: checkpoint ${cno} was not published: the container was removed and made again meanwhile (at ${isoTime(now.inode.ctimeMs)}; this file's was made at ${isoTime(core.ctimeMs)}), and this file's block map points into the removed one's objects; this handle publishes nothing more: open the container again`,
    err,
  )
}

/**
 * Before a conflict moves this file onto the checkpoint another writer published: every
 * object of the checkpoint it was built on (or older) that its block map still points into
 * must exist. That checkpoint was superseded meanwhile, and the cleaner may have dropped it
 * (it keeps a superseded checkpoint for its grace period only): publishing on top would
 * then make a checkpoint that cannot be read. Looked at: the objects the nodes in memory
 * name (the root's and every loaded node's entries), one HEAD each. ERR_CONFLICT when one
 * is gone, and the file stays on its ETag, so that a later flush meets the same conflict.
 */
async function checkBase(core: FileState, cno: number, now: Published): Promise<void> {
  const base = core.published.cno
  const keys = new Set<string>()
  const visit = (node: MapNode) => {
    for (let i = 0; i < node.count; i++) {
      const hi = node.hi[i] as number
      if (hi !== 0 && hi <= base) keys.add(segmentKey(hi, pointerPart(node.lo[i] as number)))
      const child = node.children?.[i]
      if (child !== undefined) visit(child)
    }
  }
  visit(core.map.root)
  const gone = await firstMissing(core.store, [...keys], core.signal)
  if (gone !== undefined) {
    throw StreamSegmentError.conflict(
      `${core.store.url}: checkpoint ${cno} was not published: another writer published checkpoint ${now.inode.cno}, and ${gone}, which this file's block map points into (it was built on checkpoint ${base}), is gone (a cleaner dropped that checkpoint since): nothing was published; open the container again`,
    )
  }
}

/** The first failure of one of the objects sendAll sends, which stops the others. */
interface Halt {
  failure?: unknown
}

/**
 * `plan` as the uploader takes it, but not started once another object of the same
 * sendAll failed: its first bytes are not taken (nor sent), that failure is its own. An
 * object started goes on: stored, it is kept for the next flush.
 */
function haltable(plan: ObjectPlan, halt: Halt): Uploadable {
  return {
    key: plan.key,
    size: plan.size,
    take: (start, end) =>
      start === 0 && halt.failure !== undefined ? Promise.reject(halt.failure) : plan.take(start, end),
  }
}

/**
 * Sends objects concurrently; records each one stored; throws the first failure after all
 * settle. Once one has failed, the flush fails: the objects not started yet are not (a
 * store refusing every body would otherwise be sent a piece of every object, each
 * retried, its bytes read from their source, before the flush reports it). Their blocks
 * stay dirty, sent by the next flush.
 */
async function sendAll(
  core: FileState,
  timing: FlushTiming,
  makers: Array<(cno: number, part: number) => ObjectPlan>,
): Promise<void> {
  const halt: Halt = {}
  const results = await Promise.allSettled(makers.map((make) => send(core, make, false, halt)))
  let failure: unknown
  for (const r of results) {
    if (r.status === 'rejected') failure ??= r.reason
    else record(core, timing, r.value)
  }
  if (failure !== undefined) throw failure
}

/**
 * How long an abort waits for the answer to an inode write already sent. The inode write is
 * the commit point: cut, its answer would be lost, and whether the checkpoint was published
 * could not be told (nor part 0 deleted: the write may land after the cut). Waited for, the
 * flush reports what happened: published, it resolves. A store that has not answered by
 * then is cut all the same. The request that makes a part 0 visible is waited for the same
 * way (answerAwaited), so that a part 0 that lands is deleted.
 */
const INODE_ABORT_WAIT_MS = 10_000
/** How long deleting an unpublished checkpoint's part 0 may take (not cut by an abort of the file: it must not stay). */
const PART0_DROP_MS = 10_000

/**
 * The signal of a request whose answer an abort waits for (see INODE_ABORT_WAIT_MS): the
 * inode write, and the request that makes a part 0 visible (its PutObject, or the
 * completion of its multipart upload). A part 0 whose answer an abort cut could land
 * after it, where nothing deletes it, and the next writer to open the container would
 * roll forward a checkpoint the caller was told was not published. It fires
 * INODE_ABORT_WAIT_MS (the test hook abortWaitMs) after the file's signal; such a request
 * is not started once the file is aborted (Uploader.upload).
 */
function answerAwaited(core: FileState): { signal: AbortSignal; done: () => void } {
  return signalAfter(core.signal, abortWaitMs(core))
}

/** The errors of aborts that left a checkpoint's publication unknown (putInode). */
const unknownOutcomes = new WeakSet<object>()

/**
 * Whether `err` is an abort's error that says more than the abort: the inode write did not
 * answer in time, and whether the checkpoint was published is unknown. The handle reports
 * it instead of the abort's own error.
 */
export function isUnknownOutcome(err: unknown): boolean {
  return typeof err === 'object' && err !== null && unknownOutcomes.has(err)
}

function abortWaitMs(core: FileState): number {
  return core.settings.abortWaitMs ?? INODE_ABORT_WAIT_MS
}

/**
 * Phase 3's request: the inode written If-Match (see INODE_ABORT_WAIT_MS for how an abort
 * meets it). An abort whose wait ran out says that the outcome is unknown: the write may
 * still land, so part 0 is kept (deleted, a checkpoint the inode then names would be lost).
 */
async function putInode(core: FileState, inode: Inode): Promise<{ etag: string; bytes: number }> {
  const answer = answerAwaited(core)
  try {
    return await publishInode(core.store, inode, core.publishedEtag, answer.signal)
  } catch (err) {
    if (!answer.signal.aborted) throw err
    const unknown = StreamSegmentError.aborted(
      `${core.store.url}: checkpoint ${inode.cno}: aborted while its inode write was under way, which did not answer within ${abortWaitMs(core)} ms: whether the checkpoint was published is unknown; its part 0 (${segmentKey(inode.cno, 0)}) is kept, and a writer opening the container after rollForwardAfterMs may publish it`,
      core.signal.reason,
    )
    unknownOutcomes.add(unknown)
    throw unknown
  } finally {
    answer.done()
  }
}

/**
 * The inode write failed without saying whether it landed (a lost answer, a timeout, a
 * failing store): the container may now hold this checkpoint, or not. The file takes its
 * commit point for unknown: a copy of the inode it had under an ETag no inode has. So its
 * next flush publishes even with nothing changed since (a rollback takes the file back to
 * its base, which the container may no longer hold), and meets a conflict, which reads
 * the inode again: the file's view is then published on top (conflictPolicy 'retry'), or
 * ERR_CONFLICT says so ('fail'). A file that never published keeps no ETag: its next write
 * (If-None-Match: *) creates the inode when the lost one did not land, and meets a conflict
 * when it did; under an ETag, an If-Match on a key that does not exist would fail as a
 * removed container, and the handle could never publish.
 */
function commitPointUnknown(core: FileState): void {
  const etag = core.publishedEtag === undefined ? undefined : SUPERSEDED
  core.republished({ inode: { ...core.published }, etag })
}

/**
 * An abort that comes after part 0 is stored and before the inode write is sent: part 0 is
 * deleted, then the flush fails with the abort's error. Left, it would be a complete
 * checkpoint whose publication was interrupted, which the next writer to open the
 * container rolls forward: published after all, though the caller was told it was not.
 * One too old to delete (dropPart0) is kept, and the error says the outcome is unknown.
 */
async function refuseIfAborted(core: FileState, part0: ObjectPlan): Promise<void> {
  if (!core.signal.aborted) return
  if (await giveUpPart0(core, part0)) throw keptPart0(core, part0, core.signal.reason)
  throw core.signal.reason
}

/**
 * The error of a flush that gave its checkpoint up once part 0 was stored, when part 0 was
 * kept for its age (dropPart0): a writer opening the container may have published it, or
 * may publish it. After a stop, an ERR_ABORTED saying the outcome is unknown (which the
 * handle reports as it is); otherwise `err` with that said, its code kept (ERR_STORE for one
 * that is no StreamSegmentError).
 */
function keptPart0(core: FileState, part0: ObjectPlan, err: unknown): StreamSegmentError {
  const { cno } = part0.ctx
  const kept = `checkpoint ${cno}'s part 0 (${part0.key}) is kept: its upload started so long ago that a writer opening the container may have published it already (roll-forward), or may publish it after rollForwardAfterMs`
  if (core.signal.aborted) {
    const unknown = StreamSegmentError.aborted(
      `${core.store.url}: checkpoint ${cno}: aborted after its part 0 was stored; ${kept}: whether the checkpoint was published is unknown`,
      core.signal.reason,
    )
    unknownOutcomes.add(unknown)
    return unknown
  }
  const why = err instanceof Error ? err.message : showValue(err)
  return new StreamSegmentError(StreamSegmentError.is(err) ? err.code : 'ERR_STORE', `${why}; yet ${kept}`, {
    cause: err,
  })
}

/**
 * Before the inode write: every object the checkpoint points into among its writer's own
 * numbers (above the checkpoint it is built on), part 0 included, must be stored.
 * - A container's first checkpoint (create-only inode write): with no inode yet, removing
 *   the container (rm) takes each of its objects for an abandoned attempt's and deletes
 *   it, and the inode write, which only asks that there be no inode, would publish a
 *   checkpoint pointing into them.
 * - A later one that stored objects before its part 0 (sent ahead, partial segments, data
 *   parts): a cleaner whose grace period is shorter than this checkpoint has taken so far
 *   (a slow stream) takes them for an abandoned attempt's and deletes them, and leaves the
 *   inode as it was, so the If-Match inode write would publish a checkpoint pointing into
 *   them. One of part 0 alone needs no look: part 0 was stored just now, and removing the
 *   container deletes the objects of the checkpoint it is built on, so the If-Match write
 *   fails once the inode is gone.
 * - After a conflict, objects this writer stored under numbers at or below the checkpoint it
 *   moved onto (sent ahead before the other writer published) are still its own: their
 *   number has a part 0 now, so gc counts them neither an attempt's nor reached, and takes
 *   them once past its grace period (before a retry, or before a flush called again after
 *   'fail'). They are looked for too: the numbers looked at are those above `base`, which
 *   a conflict does not move (FileState.republished).
 * One listing of the numbers looked at. On an object gone, part 0 is deleted and the flush
 * fails with ERR_CONFLICT; nothing is published, and the handle's later flushes meet the
 * same. A listing that fails deletes part 0 too, and its error is the flush's: the changes
 * stay dirty for the next flush.
 */
async function checkOwnObjects(core: FileState, part0: ObjectPlan): Promise<void> {
  const first = core.publishedEtag === undefined
  const { cno } = part0.ctx
  // Above the inode the file is built on, not the one published now: after a conflict the
  // file moved onto another writer's checkpoint, numbered above objects it sent before.
  const { keys, low } = pointedInto(core, part0, first ? 0 : core.base.cno)
  if (!first && keys.size === 1) return // part 0 alone
  // Not looked at (a failing store, an abort) is not published either: part 0 goes too.
  const stored = await checkpointKeys(core.store, low, cno, core.signal).catch(async (err: unknown) => {
    if (await giveUpPart0(core, part0)) throw keptPart0(core, part0, err)
    throw err
  })
  const gone = [...keys].find((key) => !stored.has(key))
  if (gone === undefined) return
  // No roll-forward publishes it now (it checks the objects a checkpoint names), and one
  // that did before they went published a checkpoint that lacks them already: deleted.
  await giveUpPart0(core, part0, true)
  if (first) {
    throw StreamSegmentError.conflict(
      `${core.store.url}: checkpoint ${cno}, the container's first, was not published: objects of it were removed while it was written (the container was removed meanwhile), ${gone} among them; nothing was published, and this handle's next flushes meet the same: write the data again`,
    )
  }
  throw StreamSegmentError.conflict(
    `${core.store.url}: checkpoint ${cno} was not published: objects it stored before its part 0 were deleted while it was written (a gc whose grace period is shorter than the checkpoint took, or the container removed), ${gone} among them; nothing was published, and this handle's next flushes meet the same: open the container again and write the data again`,
  )
}

/**
 * Part 0 of a checkpoint that will not be published: its bytes unsent again, the object
 * deleted. Resolves to true when it was kept instead (dropPart0: so old that a writer
 * opening the container may publish it), unless `unpublishable`: objects it points into
 * are gone.
 */
async function giveUpPart0(core: FileState, part0: ObjectPlan, unpublishable = false): Promise<boolean> {
  part0.unplace()
  return (await dropPart0(core, part0Ref(part0), false, unpublishable)) === 'kept'
}

/**
 * The objects of checkpoints above `above` and up to part 0's that a checkpoint may point
 * into: part 0, what its nodes and the inode's root name, what the nodes in memory name (the root's
 * and every loaded node's entries), and every object this writer stored above the
 * checkpoint it is built on (FileState.storedAbove): a leaf dropped from the node cache is
 * named by its parent, but the objects its own entries point into may be named by no node
 * in memory. Objects of numbers above part 0's (writes since a background publish built
 * it) are not its. `low`: the lowest number among them.
 */
function pointedInto(core: FileState, part0: ObjectPlan, above: number): { keys: Set<string>; low: number } {
  const { cno, inode } = part0.ctx
  // Objects as numbers (cno × 2^14 + part, below 2^44), the key strings made once each at
  // the end: a map's entries name few objects, each many times over.
  const objects = new Set<number>()
  let last = -1
  const add = (hi: number, lo: number) => {
    if (hi <= above || hi > cno) return
    const object = hi * (MAX_PART + 1) + pointerPart(lo)
    if (object === last) return
    last = object
    objects.add(object)
  }
  for (let i = 0; i < inode.rootCount; i++) add(inode.rootPtrHi[i] as number, inode.rootPtrLo[i] as number)
  for (const im of part0.images) for (let i = 0; i < im.hi.length; i++) add(im.hi[i] as number, im.lo[i] as number)
  const visit = (node: MapNode) => {
    for (let i = 0; i < node.count; i++) {
      add(node.hi[i] as number, node.lo[i] as number)
      const child = node.children?.[i]
      if (child !== undefined) visit(child)
    }
  }
  visit(core.map.root)
  for (const object of core.storedAbove) {
    const hi = Math.floor(object / (MAX_PART + 1))
    if (hi > above && hi <= cno) objects.add(object)
  }
  const keys = new Set<string>([part0.key])
  let low = cno
  for (const object of objects) {
    const hi = Math.floor(object / (MAX_PART + 1))
    keys.add(segmentKey(hi, object % (MAX_PART + 1)))
    low = Math.min(low, hi)
  }
  return { keys, low }
}

/** When each part 0's upload started (performance.now()): how old it can be in the store (dropPart0). */
const part0Sent = new WeakMap<ObjectPlan, number>()

function part0Ref(plan: ObjectPlan): Part0Ref {
  // Unknown (no upload of it started here): as old as can be, so never deleted.
  const sentMs = part0Sent.get(plan) ?? Number.NEGATIVE_INFINITY
  return { key: plan.key, cno: plan.ctx.cno, part: plan.ctx.part, inode: plan.ctx.inode, sentMs }
}

/** A part 0 whose upload failed past its deadline: it may land yet, and is deleted when the changes are given up. */
function leavePart0(core: FileState, plan: ObjectPlan): void {
  log('%s: its upload failed past its deadline; left, until a rollback or close deletes it', plan.key)
  core.leftPart0s.push(part0Ref(plan))
}

/**
 * Deletes the part 0s that failed uploads may have left (FileState.leftPart0s): called by
 * a rollback and a close, which give up the changes those checkpoints held, so that no
 * writer opening the container rolls them forward. Best effort, as dropPart0; one still on
 * its way to the store when this looks is not found, and stays. One whose delete failed
 * stays in the list, for the next rollback or the close to try again.
 */
export async function dropLeftPart0s(core: FileState): Promise<void> {
  const left = core.leftPart0s.splice(0)
  for (const ref of left) if ((await dropPart0(core, ref, true)) === 'failed') core.leftPart0s.push(ref)
}

/**
 * How dropPart0 ended: 'kept' for its age (it may be published, or be published later),
 * 'done' (deleted, not found, or another writer's), or 'failed' (the store failed the
 * look or the delete, or did not answer in time: it may be there still).
 */
type Part0Drop = 'kept' | 'done' | 'failed'

/**
 * Deletes the part 0 of a checkpoint whose inode write was never sent: aborted before it,
 * or whose upload failed (best effort: a store that fails the delete leaves it, and a
 * writer opening the container after `rollForwardAfterMs` may publish it; so does one
 * whose upload started too long ago to tell it was not published so). `mayBeOthers`:
 * its upload failed or was cut before it answered, so the key may hold another writer's
 * part 0 under the same number (segment objects are create-only: ours may never have been
 * written): it is deleted only when the inode in its header is ours. Resolves to 'kept'
 * when it was left for being that old (it may be published, or be published later), to
 * 'failed' when the store failed (Part0Drop). `unpublishable`: objects it points into are
 * gone, so that no roll-forward publishes it (checkOwnObjects): deleted whatever its age.
 */
async function dropPart0(
  core: FileState,
  part0: Part0Ref,
  mayBeOthers: boolean,
  unpublishable = false,
): Promise<Part0Drop> {
  const { cno, part, inode } = part0
  // A writer opening the container publishes a complete part 0 built on the inode it finds
  // once it is rollForwardAfterMs old by the store's clock, dated when it was written, which
  // is no earlier than its upload started here: one stored just now whose upload (or what
  // came after it: verifying the sources, the look at its own objects) took that long is
  // that old as soon as it is there. If it may be that old before this delete is done, it
  // may be published already, or being published (its content checked, its inode write on
  // the way), and deleted, that checkpoint would lose its part 0. It stays, as after a crash.
  const oldest = performance.now() - part0.sentMs + PART0_DROP_MS + CLOCK_OFFSET_NOISE_MS
  if (!unpublishable && !(oldest < core.settings.rollForwardAfterMs)) {
    log(
      '%s: not deleted (its checkpoint not published): its upload started %s ms ago, a writer opening the container may roll it forward (rollForwardAfterMs %d)',
      part0.key,
      Math.round(performance.now() - part0.sentMs),
      core.settings.rollForwardAfterMs,
    )
    return 'kept'
  }
  const signal = AbortSignal.timeout(PART0_DROP_MS)
  try {
    if (mayBeOthers) {
      // ERR_NOT_FOUND when it never landed: nothing to delete.
      const { header } = await readObjectHeader(core.store, cno, part, { format: core.format, signal })
      if (inode === undefined || !sameInode(header.inode, inode)) return 'done'
    }
    await deleteSegments(core.store, [part0.key], signal)
    log('%s: deleted, its checkpoint not published', part0.key)
    return 'done'
  } catch (err) {
    if (mayBeOthers && StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return 'done' // never landed
    log('%s: not deleted (its checkpoint not published): %s', part0.key, (err as Error)?.message ?? err)
    return 'failed'
  }
}

/**
 * Every source written by reference into this checkpoint must still be what it was when
 * read (BlockSource.verify): a file rewritten in place during the upload would otherwise
 * publish torn. Called once every object, part 0 included, is stored, so no read of a
 * source comes after it. On a change, part 0 is deleted (no roll-forward may publish it),
 * and the flush fails with ERR_STATE; nothing is published. A part 0 too old to delete
 * (dropPart0) is kept, and the error says so.
 */
async function verifySources(core: FileState, part0: ObjectPlan): Promise<void> {
  try {
    for (const source of core.sources) await source.verify?.()
  } catch (err) {
    const changed = StreamSegmentError.is(err)
      ? err
      : StreamSegmentError.state(`a source changed: ${err instanceof Error ? err.message : showValue(err)}`, err)
    if (await giveUpPart0(core, part0)) throw keptPart0(core, part0, changed)
    throw changed
  }
}

function hasDirtyChild(n: MapNode): boolean {
  for (let i = 0; i < n.count; i++) if (n.children?.[i]?.dirty) return true
  return false
}

/** The checkpoint's inode: the root with the locations part 0 gives its dirty children. */
function checkpointInode(core: FileState, cno: number, part0: ObjectPlan): Inode {
  const inode = core.inodeNow(cno)
  const root = core.map.root
  inode.rootLevel = root.level
  inode.rootCount = root.count
  for (let i = 0; i < root.count; i++) {
    inode.rootKeys[i] = root.keys[i] as number
    let hi = root.hi[i] as number
    let lo = root.lo[i] as number
    const child = root.children?.[i]
    if (child?.dirty) {
      const at = part0.plannedLo(child)
      if (at === undefined)
        throw StreamSegmentError.internal(`checkpoint ${cno}: a dirty child of the root is not in part 0`)
      hi = cno
      lo = at
    } else if (root.level === 0 && hi === 0 && lo >= 2) {
      const k = part0.blockIndex.indexOf(root.keys[i] as number)
      if (k < 0) throw StreamSegmentError.internal(`checkpoint ${cno}: a dirty block of the root is not in part 0`)
      hi = cno
      lo = part0.dataLo(k)
    }
    inode.rootPtrHi[i] = hi
    inode.rootPtrLo[i] = lo
  }
  return inode
}
