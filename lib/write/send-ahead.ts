/**
 * Sending ahead: objects of the coming checkpoint sent while the file is written, so
 * the flush is left with the tail (`streamSegmentBytes`, the spec's *Sending ahead*).
 *
 * - Target ≤ one piece (`segmentMpuChunkSize`): each object is sent whole, in one
 *   PutObject, as soon as the unsent dirty data under whole leaves makes one target's
 *   worth; it takes leaves in order until it holds the target (the last leaf may take it
 *   a little over, never over segmentMaxObjectBytes) and leaves the rest.
 * - Larger: one multipart object is filled a piece at a time, each piece exactly
 *   `segmentMpuChunkSize` bytes of unsent blocks in key order, and closed once it holds
 *   the target. Before a piece is placed, the object must have room for it and its
 *   leaves with one leaf in sixteen spare; if not, it is closed early and the piece
 *   starts the next object. Closing appends the unsent blocks still under its leaves,
 *   then its leaves, summary and header; if leaf splits outran the spare and it would
 *   exceed the limit, it is given up (aborted; its blocks stay dirty and count as dead).
 *   A block the open object holds and that is written again is not sent again in a
 *   later piece: its last bytes go when the object closes, or with the flush.
 * - A leaf never leaves its data: an object stores every leaf holding one of its blocks,
 *   with pointers to where each dirty block under it was placed (this object, or another
 *   in flight). Such a leaf becomes clean only if, when the object completes, it is
 *   entry for entry what the object stored.
 * - Nor is a leaf split from the data written next: the leaf sequential writes still
 *   append to waits until it is full (object-plan.ts, growingLeaf), and only the flush
 *   takes it as it is.
 * - At most `segmentMpuMaxConcurrency` requests are in flight (the uploader's shared
 *   semaphore); the writer waits for room, never for completion.
 * - An object that fails is aborted and its blocks are unsent again: the flush (or a
 *   later object) writes them, nothing is lost, and it is not an error. Anything else
 *   thrown in an upload task is a bug: it is kept and thrown from the next call that
 *   takes objects in (`check`: a write, a flush, a rollback).
 */
import debug from 'debug'
import type { MultipartObject } from '../container/uploader.js'
import { StreamSegmentError } from '../errors.js'
import { FLAG_SENT_AHEAD } from '../format/header.js'
import { FORMAT_PARTED, type Inode } from '../format/inode.js'
import { dataSlotsBytes, MAX_OBJECT_BYTES, objectBytes } from '../format/layout.js'
import { pointerLo, UNIT_BYTES } from '../format/pointer.js'
import type { MapNode } from '../state/block-map.js'
import { DIRTY_BASE, isDirtyRef, mapDirtyRefWrites } from '../state/block-map.js'
import type { CheckpointCounters, FileState, ObjectContext } from '../state/file-state.js'
import { printableLog } from '../util/shell-words.js'
import { growingLeaf, newObjectId, ObjectPlan, SentBlocks, takeBlocks, unsentUnder } from './object-plan.js'

const log = printableLog(debug('stream-segment:send'))
const FAILURES_BEFORE_PAUSE = 3

/** Unsent blocks in key order: the first `count` keys, slots, and the leaf of each. */
interface Piece {
  count: number
  keys: Uint32Array
  slots: Int32Array
  leaves: MapNode[]
}

/** The multipart object being filled. */
interface OpenObject {
  id: number
  cno: number
  part: number
  key: string
  upload: MultipartObject
  sent: SentBlocks
  leaves: Set<MapNode>
  /**
   * The inode the file was built on when the object was opened: its header's base inode,
   * below its number. A background publish that loses to another writer moves the file
   * onto a checkpoint that may be numbered at or above the open object's.
   */
  base: Inode
}

export class SendAhead {
  private open: OpenObject | undefined
  private running = new Set<Promise<void>>()
  private aborting = new Set<Promise<void>>()
  private bug: unknown
  /** Lowest block that may be unsent (a hint that spares scanning sent leaves). */
  private scanFrom = 0
  /** Do not scan again before this many bytes are unsent (the last scan found too few). */
  private scanAt = 0
  /**
   * Objects failed in a row: from FAILURES_BEFORE_PAUSE on, nothing more is sent ahead
   * until the flush, or until a partial segment is stored (`resume`).
   */
  private failures = 0

  /**
   * Leaves found with no unsent block under them, while the dirty tier's `unplacings` and
   * the maps' dirty-reference writes stay at `noneAt`: until one of those moves, such a
   * leaf gains none (placing only sends), so `fits` need not count it again. Without this,
   * an object near `segmentMaxObjectBytes` had every one of its leaves counted for every
   * piece: a cost in the square of the object's size. (`fits` decides where objects end;
   * `close` still refuses one over the maximum.)
   */
  private noneUnder = new WeakSet<MapNode>()
  private noneAt: { tier: unknown; unplacings: number; writes: number } = {
    tier: undefined,
    unplacings: -1,
    writes: -1,
  }

  constructor(private readonly core: FileState) {}

  /** The object size aimed at: streamSegmentBytes, capped at segmentMaxObjectBytes and 1 GiB. */
  get target(): number {
    // A PartedSegment object is built whole before it is sent: nothing goes ahead.
    if (this.core.format === FORMAT_PARTED) return 0
    const s = this.core.settings
    return Math.min(s.streamSegmentBytes, s.segmentMaxObjectBytes, MAX_OBJECT_BYTES)
  }

  get inFlight(): number {
    return this.running.size
  }

  /** A write touched blocks from `block` on. */
  noteWrite(block: number): void {
    if (block < this.scanFrom) this.scanFrom = block
  }

  /** An object of this file was stored (a partial segment): sending ahead goes on, if it had paused. */
  resume(): void {
    this.failures = 0
  }

  /** Throws a bug kept from an upload task. */
  check(): void {
    if (this.bug !== undefined) throw this.bug
  }

  /** Sends what there is to send after a write (waiting only for room to send it). */
  async afterWrite(): Promise<void> {
    this.check()
    const target = this.target
    if (this.paused) return
    if (
      target === 0 ||
      this.core.tier.unplacedBytes < Math.min(target, this.pieceSize) ||
      this.core.tier.unplacedBytes < this.scanAt
    )
      return
    if (target <= this.pieceSize) await this.sendWhole(target)
    else await this.sendPieces(target, false)
  }

  /**
   * For the flush: sends what is unsent into the open object as pieces while it has room,
   * closes it, and waits for every object in flight.
   */
  async drain(): Promise<void> {
    this.check()
    if (this.open !== undefined) {
      await this.sendPieces(this.target, true)
      if (this.open !== undefined) await this.close(true)
    }
    await this.settle()
    this.failures = 0
    this.check()
  }

  /** Over the dirty limit: closes the open object at whatever size it has, and waits for every object. */
  async relieve(): Promise<void> {
    this.check()
    if (this.open !== undefined) await this.close(false)
    await this.settle()
    this.check()
  }

  /** Waits for every object in flight (each one's own outcome is handled by its task). */
  async settle(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running])
  }

  /** Gives up the open object and waits for the rest (rollback, close, abort). */
  async abandon(): Promise<void> {
    const open = this.open
    this.open = undefined
    if (open !== undefined) {
      await open.upload.settled()
      const plan = new ObjectPlan(this.context(open), this.core.tier, [], [], undefined, open.sent)
      await this.fail(plan, open.sent.count, 'abandoned', open)
    }
    await this.settle()
    await Promise.allSettled([...this.aborting])
    this.scanFrom = 0
    this.scanAt = 0
  }

  /**
   * Objects failed in a row: nothing more is sent ahead (the writer writes partial
   * segments at the dirty limit, whose failures reach the caller). Checked before each
   * object too, not only on entry: the objects of one call fail while it waits for room,
   * their blocks are unsent again, and the next object would take them, without end.
   */
  private get paused(): boolean {
    return this.failures >= FAILURES_BEFORE_PAUSE
  }

  private get pieceSize(): number {
    return this.core.settings.segmentMpuChunkSize
  }

  /**
   * Up to `max` unsent blocks from the scan hint on, in key order, but those `skip` held
   * before and those under `hold`: their keys, slots and leaves (a leaf once per block)
   * into `piece`.
   */
  private unsent(skip: number, max: number, piece: Piece, hold: MapNode | undefined): void {
    const { tier, map } = this.core
    const { keys, slots, leaves } = piece
    let n = 0
    piece.count = 0
    let first = true
    for (const leaf of map.dirtyNodes().leaves) {
      if (leaf.dirtyCount === 0 || (leaf.keys[leaf.count - 1] as number) < this.scanFrom || leaf === hold) continue
      const his = leaf.hi
      const los = leaf.lo
      for (let i = 0; i < leaf.count; i++) {
        const lo = los[i] as number
        if (!isDirtyRef(his[i] as number, lo)) continue
        const slot = lo - DIRTY_BASE
        if (tier.placed(slot) || (skip !== 0 && tier.placedObject(slot) === skip)) continue
        if (first) {
          this.scanFrom = leaf.keys[0] as number
          first = false
        }
        keys[n] = leaf.keys[i] as number
        slots[n] = slot
        leaves[n] = leaf
        piece.count = ++n
        if (n === max) return
      }
    }
  }

  /** Leaves holding unsent blocks from the scan hint on, in key order, with their counts, but `hold`. */
  private *unsentLeaves(hold: MapNode | undefined): Generator<[MapNode, number]> {
    const { tier, map } = this.core
    let first = true
    for (const leaf of map.dirtyNodes().leaves) {
      if (leaf.dirtyCount === 0 || (leaf.keys[leaf.count - 1] as number) < this.scanFrom || leaf === hold) continue
      const n = unsentUnder(leaf, tier)
      if (n === 0) continue
      if (first) {
        this.scanFrom = leaf.keys[0] as number
        first = false
      }
      yield [leaf, n]
    }
  }

  private async sendWhole(target: number): Promise<void> {
    const core = this.core
    const s = core.settings
    for (;;) {
      // Aborted, every request fails and puts its blocks back: never send them again.
      // Paused, the same: the failed objects' blocks came back while this one waited for room.
      if (core.signal.aborted || this.paused) return
      // Whole leaves, in order, while the object stays within the target.
      const group: MapNode[] = []
      let blocks = 0
      let size = objectBytes(0, 0, 1, 1)
      let full = false
      for (const [leaf, n] of this.unsentLeaves(growingLeaf(core))) {
        const add = dataSlotsBytes(n, core.blockSize) + s.metaBlockSize
        // A leaf never leaves its data, so the last leaf may take the object a little over
        // its target, never over segmentMaxObjectBytes.
        if (group.length > 0 && size + add > s.segmentMaxObjectBytes) {
          full = true
          break
        }
        group.push(leaf)
        blocks += n
        size += add
        if (size >= target) {
          full = true
          break
        }
      }
      if (blocks === 0 || !full) {
        this.scanAt = core.tier.unplacedBytes + (target - size)
        return
      }
      const { cno, part } = core.reserve()
      const plan = new ObjectPlan(core.context(cno, part, FLAG_SENT_AHEAD), core.tier, group)
      const counters = this.core.counters
      counters.streamSentBytes += plan.dataBlocks * core.blockSize
      const { done } = await core.uploader.startPut(plan, core.signal)
      this.track(plan, done, counters)
    }
  }

  private async sendPieces(target: number, flushing: boolean): Promise<void> {
    const core = this.core
    const perPiece = this.pieceSize / core.blockSize
    const piece: Piece = {
      count: 0,
      keys: new Uint32Array(perPiece),
      slots: new Int32Array(perPiece),
      leaves: new Array<MapNode>(perPiece),
    }
    for (;;) {
      // As in sendWhole; the flush fills and closes its open object all the same.
      if (core.signal.aborted || (!flushing && this.paused)) return
      // The flush takes the leaf still growing too: nothing more will be appended to it.
      this.unsent(this.open?.id ?? 0, perPiece, piece, flushing ? undefined : growingLeaf(core))
      if (piece.count < perPiece) {
        this.scanAt = core.tier.unplacedBytes + (perPiece - piece.count) * core.blockSize
        return
      }
      let open = this.open
      // Room for this piece, its leaves (one in sixteen spare) and every unsent block under
      // them, which go with the leaves when the object closes?
      if (open !== undefined && !this.fits(open.sent.count, open.leaves, piece)) {
        if (!(await this.close(flushing))) return // given up: try again after the next write
        continue // closing took the unsent blocks under its leaves: look again
      }
      if (open === undefined) {
        if (flushing) return // the flush writes the rest itself
        if (!this.fits(0, new Set(), piece)) {
          // Not even a new object holds these leaves' blocks: leave them to partials and the flush.
          this.scanAt = core.tier.unplacedBytes + this.pieceSize
          return
        }
        open = this.openObject(piece)
      }
      const first = open.sent.count
      open.sent.append(piece.keys, piece.slots, piece.count)
      let last: MapNode | undefined
      for (let j = 0; j < piece.count; j++) {
        const leaf = piece.leaves[j] as MapNode
        if (leaf !== last) open.leaves.add((last = leaf))
      }
      const o = open
      const counters = this.core.counters
      if (flushing) counters.streamFlushBytes += this.pieceSize
      else counters.streamSentBytes += this.pieceSize
      await o.upload.startPart(() => this.takePiece(o, first, perPiece)) // judged when the object closes
      if (!flushing && open.sent.count * core.blockSize >= target && !(await this.close(false))) return
    }
  }

  /** Whether an object holding `sent` blocks and `leaves` has room for `piece` as the spec counts it. */
  private fits(sent: number, leaves: ReadonlySet<MapNode>, piece: Piece): boolean {
    const core = this.core
    const bs = core.blockSize
    const mbs = core.settings.metaBlockSize
    const max = core.settings.segmentMaxObjectBytes
    // The piece's leaves not yet in the object (a piece's blocks come in key order, so a
    // leaf's blocks are adjacent in it).
    const added: MapNode[] = []
    let last: MapNode | undefined
    for (let j = 0; j < piece.count; j++) {
      const leaf = piece.leaves[j] as MapNode
      if (leaf !== last && !leaves.has(leaf) && !added.includes(leaf)) added.push(leaf)
      last = leaf
    }
    const spare = Math.ceil(((leaves.size + added.length) * 17) / 16)
    // Their dirty entries bound the unsent blocks under them, and so do all the tier's
    // unsent blocks: when even the lesser fits, no leaf need be scanned (the usual case
    // but near the end of an object that fills the limit).
    let entries = 0
    for (const leaf of leaves) entries += leaf.dirtyCount
    for (const leaf of added) entries += leaf.dirtyCount
    const unsentAll = core.tier.unplacedBytes / bs
    if (objectBytes(sent + Math.min(entries, unsentAll), spare, bs, mbs) <= max) return true
    let unsent = 0
    for (const leaf of leaves) unsent += this.unsentUnder(leaf)
    for (const leaf of added) unsent += this.unsentUnder(leaf)
    return objectBytes(sent + unsent, spare, bs, mbs) <= max
  }

  /** unsentUnder(leaf), without counting again a leaf found with none since (see `noneUnder`). */
  private unsentUnder(leaf: MapNode): number {
    const tier = this.core.tier
    const writes = mapDirtyRefWrites()
    const at = this.noneAt
    if (at.tier !== tier || at.unplacings !== tier.unplacings || at.writes !== writes) {
      this.noneUnder = new WeakSet()
      this.noneAt = { tier, unplacings: tier.unplacings, writes }
    }
    if (this.noneUnder.has(leaf)) return 0
    const n = unsentUnder(leaf, tier)
    if (n === 0) this.noneUnder.add(leaf)
    return n
  }

  private openObject(piece: Piece): OpenObject {
    const core = this.core
    // Where its data starts, for a resume (uploader.openSegment) when that is a leaf's first
    // block: an object continuing an interrupted upload keeps that upload's (older) number,
    // so its leaves must point into itself only, never into this checkpoint's other objects.
    const firstKey = piece.keys[0] as number
    const first = (piece.leaves[0] as MapNode).keys[0] === firstKey ? firstKey * core.blockSize : undefined
    const { cno, part, key, upload } = core.uploader.openSegment(first, () => core.reserve(), core.signal)
    const id = newObjectId()
    const sent = new SentBlocks(id)
    const open: OpenObject = { id, cno, part, key, upload, sent, leaves: new Set(), base: core.published }
    this.open = open
    log('open %s', key)
    return open
  }

  /** What the open object's header says of it, built on the inode it was opened on. */
  private context(o: OpenObject): ObjectContext {
    return { ...this.core.context(o.cno, o.part, FLAG_SENT_AHEAD), baseInode: o.base }
  }

  /** The bytes of `count` blocks of the open object from its block `first`, pinned and placed. */
  private takePiece(o: OpenObject, first: number, count: number): Promise<{ chunks: Uint8Array[]; done: () => void }> {
    const tier = this.core.tier
    const bs = this.core.blockSize
    return takeBlocks(tier, o.sent.slot, first, count, (k, slot, crc) => {
      tier.place(slot, o.id, o.cno, pointerLo(o.part, (k * bs) / UNIT_BYTES))
      o.sent.gen[k] = tier.gen(slot)
      o.sent.crc[k] = crc
    })
  }

  /**
   * Closes the open object: its leaves (now, whatever splits happened), the unsent blocks
   * under them, summary and header go as its last pieces, then it completes, in the
   * background. `flushing`: the bytes appended count as the flush's.
   */
  private async close(flushing: boolean): Promise<boolean> {
    const o = this.open
    if (o === undefined) return true
    this.open = undefined
    const core = this.core
    const s = core.settings
    // The leaves holding its blocks now (a split may have moved some).
    const leaves = new Set<MapNode>()
    let last: MapNode | undefined
    for (let j = 0; j < o.sent.count; j++) {
      const key = o.sent.blockIndex[j] as number
      // A key within the last leaf's range is in that leaf, if in the map at all.
      if (last !== undefined && key >= (last.keys[0] as number) && key <= (last.keys[last.count - 1] as number)) {
        continue
      }
      const leaf = core.map.leafOf(key)
      if (leaf !== undefined) leaves.add((last = leaf))
    }
    const ordered = [...leaves].sort((a, b) => (a.keys[0] as number) - (b.keys[0] as number))
    const plan = new ObjectPlan(this.context(o), core.tier, ordered, [], undefined, o.sent)
    const counters = this.core.counters
    if (plan.size > s.segmentMaxObjectBytes) {
      await o.upload.settled()
      void this.fail(
        plan,
        o.sent.count,
        `leaves split past the spare: ${plan.size} bytes > ${s.segmentMaxObjectBytes}`,
        o,
      )
      return false
    }
    const appended = (plan.dataBlocks - o.sent.count) * core.blockSize
    if (flushing) counters.streamFlushBytes += appended
    else counters.streamSentBytes += appended
    const start = o.sent.count * core.blockSize
    for (let at = start; at < plan.size; at += this.pieceSize) {
      const end = Math.min(at + this.pieceSize, plan.size)
      await o.upload.startPart(() => plan.take(at, end))
    }
    const completion = (async () => {
      await o.upload.complete()
      log('complete %s: %d blocks, %d leaves', o.key, plan.dataBlocks, plan.images.length)
    })()
    this.track(plan, completion, counters, o)
    return true
  }

  /** Takes a completed object in, or handles its failure, when `done` settles. */
  private track(plan: ObjectPlan, done: Promise<void>, counters: CheckpointCounters, open?: OpenObject): void {
    const core = this.core
    const p = done.then(
      () => {
        this.failures = 0
        counters.objects++
        counters.streamMetaBytes += plan.images.length * core.settings.metaBlockSize
        counters.streamDeadBytes += core.applyStored(plan)
      },
      (err) => {
        if (!StreamSegmentError.is(err) || err.code === 'ERR_INTERNAL') {
          this.bug ??= err
          return
        }
        this.failures++
        // A key already taken: this checkpoint number is another attempt's; move on.
        if (err.code === 'ERR_CONFLICT') core.abandonCheckpoint()
        void this.fail(plan, plan.dataBlocks, err.message, open)
      },
    )
    const tracked = p.finally(() => this.running.delete(tracked))
    this.running.add(tracked)
  }

  /**
   * An object that cannot complete: its upload aborted (when multipart), its blocks
   * unsent again (those not written since), the `sent` blocks it had sent counted dead.
   */
  private fail(plan: ObjectPlan, sent: number, why: string, open?: OpenObject): Promise<void> {
    const core = this.core
    plan.unplace()
    this.core.counters.streamDeadBytes += sent * core.blockSize
    this.scanFrom = 0
    this.scanAt = 0
    log('%s given up (%s): its blocks go again', plan.key, why)
    if (open === undefined) return Promise.resolve()
    // What an abort that failed leaves open is a segment upload of the container: gc aborts it.
    const aborted = open.upload.abort().then(() => undefined)
    this.aborting.add(aborted)
    return aborted.finally(() => this.aborting.delete(aborted))
  }
}
