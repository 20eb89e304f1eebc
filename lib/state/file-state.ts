/**
 * The state of one open file: its block map, dirty tier, uploader, the inode it is built
 * on, the checkpoint being built and its counters. SegmentFile, write/ and read/ work on
 * it; only its own methods change its fields.
 *
 * - `published` is the inode last seen at the commit point, with its ETag: the next
 *   checkpoint replaces exactly that version (If-Match), or creates the first one
 *   (If-None-Match: *) when `publishedEtag` is undefined.
 * - The checkpoint number is taken once, at the first object of a checkpoint
 *   (`reserve`), and kept until that checkpoint publishes; each object reserves the next
 *   part number, so no key is ever written twice by this writer.
 * - When an object completes (`applyStored`), each of its blocks becomes clean only if it
 *   still maps to the slot it was sent from, at the same generation; each of its leaves
 *   only if the leaf is, entry for entry, what the object stored. Anything else stays
 *   dirty for a later object: a completed object never loses or reverts a write.
 */
import { setMaxListeners } from 'node:events'
import type { Published } from '../container/inode.js'
import { MetaRegions, readNode } from '../container/nodes.js'
import type { OpenedBytes } from '../container/opened.js'
import { Uploader } from '../container/uploader.js'
import { StreamSegmentError } from '../errors.js'
import { emptyInode, FORMAT_PARTED, FORMAT_STREAM, type Inode, madeHere } from '../format/inode.js'
import type { BlockMapNode } from '../format/node.js'
import { MAX_CNO, MAX_PART } from '../format/pointer.js'
import type { FileSettings } from '../settings.js'
import type { ObjectStore } from '../store/types.js'
import { BlockMap, DIRTY_BASE, type MapNode } from './block-map.js'
import { type BlockSource, DirtyTier } from './dirty-tier.js'

/** Per-checkpoint counters, kept from its first object to its publication (the spec's names). */
export interface CheckpointCounters {
  objects: number
  streamSentBytes: number
  streamDeadBytes: number
  /** Data bytes the flush sent, into the open object before closing it or in its own objects. */
  streamFlushBytes: number
  streamMetaBytes: number
}

/** What an object of the checkpoint being built says of itself in its header. */
export interface ObjectContext {
  cno: number
  part: number
  flags: number
  dataShift: number
  metaShift: number
  baseInode: Inode
  /** The inode to put in the header; for part 0, the checkpoint's (set before gathering the tail). */
  inode: Inode
  /** FORMAT_STREAM or FORMAT_PARTED. */
  format: number
}

/** A node as an object stores it: entries copied when the object was planned. */
export interface NodeImage {
  node: MapNode
  level: number
  keys: Uint32Array
  hi: Uint32Array
  lo: Uint32Array
}

/** A completed object, as the state takes it in (write/object-plan.ts's ObjectPlan). */
export interface StoredObject {
  readonly ctx: { cno: number; part: number }
  readonly dataBlocks: number
  readonly blockIndex: ArrayLike<number>
  readonly slot: ArrayLike<number>
  readonly images: readonly NodeImage[]
  /** Whether data block k is still what was sent (same slot, same generation). */
  unchanged(k: number): boolean
  /** The pointer's low half of data block k, and of meta block j, in this object. */
  dataLo(k: number): number
  metaLo(j: number): number
}

/** A part 0 as deleting it needs: its key, numbers and the checkpoint's inode (undefined before it was built). */
export interface Part0Ref {
  key: string
  cno: number
  part: number
  inode: Inode | undefined
  /** When its upload started (performance.now()). */
  sentMs: number
}

/**
 * ERR_STATE: the next checkpoint would need a number past the last a key can carry
 * (MAX_CNO, taken by the published checkpoint or an abandoned attempt). Nothing more can be
 * published in this container; it can still be read.
 */
export function noNumbersLeft(url: string): StreamSegmentError {
  return StreamSegmentError.state(
    `${url}: no checkpoint numbers are left (${MAX_CNO} is the last, and it is taken): nothing more can be published here; a read-only handle reads it`,
  )
}

function newCounters(): CheckpointCounters {
  return { objects: 0, streamSentBytes: 0, streamDeadBytes: 0, streamFlushBytes: 0, streamMetaBytes: 0 }
}

export class FileState {
  readonly map: BlockMap
  /** Where the meta blocks of the objects whose nodes the map loads lie (readNode checks each pointer). */
  private readonly regions: MetaRegions
  readonly tier: DirtyTier
  readonly uploader: Uploader
  readonly dataShift: number
  readonly metaShift: number
  /** FORMAT_STREAM or FORMAT_PARTED: the container's, fixed for its life. */
  readonly format: number
  private _size: number
  private _base: Inode
  private _published: Inode
  private _publishedEtag: string | undefined
  private _pending: { cno: number; nextPart: number } | undefined
  private _counters = newCounters()
  /** Aborts every request of this file (destroy, abort signal). */
  readonly abort = new AbortController()
  /**
   * Bytes of part 0 read by the open beside its header (a checkpoint opened by number):
   * the first read of that object by one of the file's readers takes them (ObjectReads).
   */
  readonly opened: { bytes: OpenedBytes | undefined } = { bytes: undefined }

  constructor(
    readonly store: ObjectStore,
    readonly settings: FileSettings,
    base: Inode,
    published: Inode,
    publishedEtag: string | undefined,
  ) {
    // Every request in flight listens to this signal: uploads, and a reader's data GETs
    // and walk reads (2 × readMaxConcurrency), past Node's default of 10 listeners.
    setMaxListeners(1024, this.abort.signal)
    this.dataShift = Math.log2(settings.dataBlockSize)
    this.metaShift = Math.log2(settings.metaBlockSize)
    this.format = settings.format === 'parted' ? FORMAT_PARTED : FORMAT_STREAM
    this.tier = new DirtyTier(settings.dataBlockSize)
    this.uploader = new Uploader(store, settings.segmentMpuChunkSize, settings.segmentMpuMaxConcurrency)
    this.regions = new MetaRegions(store, this.format)
    this.map = new BlockMap(
      settings.maxNodeEntries,
      (hi, lo, expect) => this.loadNode(hi, lo, expect),
      settings.nodeCacheNodes,
    )
    this._base = base
    this._published = published
    this._publishedEtag = publishedEtag
    this._size = base.size
    this.retriesBefore = store.retries ?? 0
    this.resetTree()
  }

  /** The file's size, including unflushed writes. */
  get size(): number {
    return this._size
  }

  /** The inode this file's state is built on (its block map's root, until changed). */
  get base(): Inode {
    return this._base
  }

  /** The inode at the commit point, and its ETag (undefined: no checkpoint yet). */
  get published(): Inode {
    return this._published
  }

  get publishedEtag(): string | undefined {
    return this._publishedEtag
  }

  /** The number of the checkpoint being built, if one has started. */
  get pendingCno(): number | undefined {
    return this._pending?.cno
  }

  /** The highest checkpoint number this file knows of: a node naming a higher one is corrupt. */
  get maxCno(): number {
    return Math.max(this._published.cno, this._base.cno, this._pending?.cno ?? 0, this.detachedCno)
  }

  /** The highest checkpoint handed to a background publish (detachCheckpoint), 0 if none. */
  private detachedCno = 0

  /** Sources of blocks written by reference into the checkpoint being built (verified before it publishes). */
  readonly sources = new Set<BlockSource>()

  /** The store's retries when the checkpoint being built began. */
  private retriesBefore = 0

  /** Requests the store retried since the checkpoint being built began (FlushTiming.retries). */
  get retries(): number {
    return (this.store.retries ?? 0) - this.retriesBefore
  }

  /** The counters of the checkpoint being built. */
  get counters(): CheckpointCounters {
    return this._counters
  }

  /** Numbers below this are taken (abandoned attempts): the next checkpoint starts at it or above. */
  private cnoFloor = 0

  /** The next checkpoint takes no number below `cno` (see container/listing.ts, firstFreeCno). */
  skipTo(cno: number): void {
    this.cnoFloor = Math.max(this.cnoFloor, cno)
  }

  /** The file now reaches at least `end` bytes. */
  grow(end: number): void {
    if (end > this._size) this._size = end
  }

  /** The file is cut (or extended with a hole) to `size` bytes. */
  resize(size: number): void {
    this._size = size
  }

  /**
   * The objects this writer stored above the checkpoint it is built on (`base`), as numbers
   * (cno × 2^14 + part, as write/flush.ts's pointedInto): what the checkpoint being built
   * may point into besides its part 0. The nodes in memory do not name them all: a clean
   * leaf dropped from the node cache is named by its parent, but the objects its entries
   * point into (its other blocks, when it was stored again in a later object) by nothing.
   * Objects whose blocks were all written again since stay listed: the flush does not
   * tell them apart, and one of them deleted (a cleaner took the attempt for abandoned)
   * fails it as one pointed into does. Numbers, one per object: a checkpoint's objects are
   * few beside its blocks.
   */
  readonly storedAbove = new Set<number>()

  /** Objects of checkpoints up to `cno`, now at or below `base`, leave `storedAbove`. */
  private forgetStored(cno: number): void {
    const last = cno * (MAX_PART + 1) + MAX_PART
    for (const object of this.storedAbove) if (object <= last) this.storedAbove.delete(object)
  }

  /** `inode` was published with `etag`: the file is built on it now, its counters start again. */
  publish(inode: Inode, etag: string): void {
    this.map.builtOn(inode.cno, this.blocksOf(inode))
    this._base = this._published = inode
    this.forgetStored(inode.cno)
    this._publishedEtag = etag
    this._pending = undefined
    this._counters = newCounters()
    this.retriesBefore = this.store.retries ?? 0
    this.sources.clear()
  }

  /**
   * The checkpoint being built, number `cno`, goes to a background publish (write/flush.ts,
   * `startPublish`) with its counters: what is written from now on builds the next one,
   * numbered above it, with counters of its own.
   */
  detachCheckpoint(cno: number): { counters: CheckpointCounters; retries: number } {
    const detached = { counters: this._counters, retries: this.retries }
    this.detachedCno = Math.max(this.detachedCno, cno)
    this.skipTo(cno + 1)
    this._pending = undefined
    this._counters = newCounters()
    this.retriesBefore = this.store.retries ?? 0
    return detached
  }

  /**
   * A checkpoint published in the background landed: the file is built on it now, and
   * what was written since stays dirty on top of it.
   */
  landed(inode: Inode, etag: string): void {
    this.map.builtOn(inode.cno, this.blocksOf(inode))
    this._base = this._published = inode
    this.forgetStored(inode.cno)
    this._publishedEtag = etag
    // Built on an older checkpoint than this one, they can no longer be rolled forward.
    this.leftPart0s.length = 0
  }

  /**
   * Part 0s of checkpoints not published that may be stored all the same, and that no one
   * has deleted: their upload failed past its call's deadline (ERR_TIMEOUT), with no time
   * left to delete them then. Each is a complete checkpoint built on the published one,
   * which a writer opening the container would roll forward; a rollback or close, which
   * give its changes up, deletes them (write/flush.ts dropLeftPart0s).
   */
  readonly leftPart0s: Part0Ref[] = []

  /** The commit point was read again (after a conflict): what is published now. */
  republished(now: Published): void {
    this._published = now.inode
    this._publishedEtag = now.etag
    // A header's base inode is below its own number, so the checkpoint being built goes
    // above the one published now: a number taken at or below it is given up (a background
    // publish loses while writes go on, objects sent ahead under that number).
    if (this._pending !== undefined && this._pending.cno <= now.inode.cno) this._pending = undefined
  }

  /** Changes are discarded: the tree goes back to `base`, the counters start again. */
  rollback(): void {
    this.sources.clear()
    // The tree no longer points into them: deleted (a cleaner), they must not stop a flush.
    this.storedAbove.clear()
    this.tier.clear()
    this.resetTree()
    this._counters = newCounters()
  }

  /**
   * The handle is closed: lets go of the block map's nodes (clean ones cached up to
   * nodeCacheNodes, and the dirty ones, given up), so that a closed handle someone still
   * holds (a write stream's `file`) keeps no more of its map than the root. The size stays,
   * for the handle's getters.
   */
  dropNodes(): void {
    this.opened.bytes = undefined
    const b = this._base
    this.map.setRoot(b.rootLevel, b.rootCount, b.rootKeys, b.rootPtrHi, b.rootPtrLo)
  }

  get blockSize(): number {
    return this.settings.dataBlockSize
  }

  get signal(): AbortSignal {
    return this.abort.signal
  }

  /** The blocks of a checkpoint: no key its map holds is at or past this. */
  private blocksOf(inode: Inode): number {
    return Math.ceil(inode.size / 2 ** inode.dataShift)
  }

  /** Rebuilds the in-memory tree from `base` (nodes load on demand). */
  private resetTree(): void {
    const b = this._base
    this.map.setRoot(b.rootLevel, b.rootCount, b.rootKeys, b.rootPtrHi, b.rootPtrLo)
    this.map.builtOn(b.cno, this.blocksOf(b))
    this._size = b.size
  }

  /** Whether a flush has anything to write. */
  get changed(): boolean {
    return this.map.root.dirty || this.size !== this.base.size || this.base !== this.published
  }

  /**
   * The checkpoint number of the checkpoint being built, and a fresh part number in it.
   * Once every part number (1 … MAX_PART) is taken, by objects stored or failed, the
   * checkpoint goes on under a new number, as after a number another writer took
   * (abandonCheckpoint): its objects stored so far stay where they are, pointed at by the
   * leaves that hold them. Refused, a stream longer than MAX_PART objects (256 GiB of
   * 16 MiB objects), or a store failing for a while, would fail every write and flush
   * that needs an object more: the handle could never publish again.
   */
  reserve(part0 = false): { cno: number; part: number } {
    let pending = (this._pending ??= { cno: Math.max(this._published.cno + 1, this.cnoFloor), nextPart: 1 })
    if (pending.cno > MAX_CNO) throw noNumbersLeft(this.store.url)
    if (part0) return { cno: pending.cno, part: 0 }
    if (pending.nextPart > MAX_PART) {
      this.abandonCheckpoint()
      pending = this._pending
      if (pending.cno > MAX_CNO) throw noNumbersLeft(this.store.url)
    }
    return { cno: pending.cno, part: pending.nextPart++ }
  }

  /** Moves to a new checkpoint number above both the published one and the one given up. */
  abandonCheckpoint(): void {
    const cno = Math.max(this._published.cno, this._pending?.cno ?? 0, this.cnoFloor - 1) + 1
    this._pending = { cno, nextPart: 1 }
  }

  /** An inode describing the file now, for a header (root filled in by the caller for part 0). */
  inodeNow(cno: number): Inode {
    const x = emptyInode({
      format: this.format,
      dataShift: this.dataShift,
      metaShift: this.metaShift,
      ctimeMs: this.ctimeMs,
    })
    x.size = this.size
    x.cno = cno
    // Never below the checkpoint it is built on, nor below the objects it may point into
    // (see madeHere): a later writer's clock may be behind.
    x.mtimeMs = Math.max(Date.now(), this.published.mtimeMs, this.base.mtimeMs, this.createdMs)
    return x
  }

  get ctimeMs(): number {
    return this.published.ctimeMs || this.base.ctimeMs || this.createdMs
  }

  /**
   * Whether an object whose header carries a file inode made at `ctimeMs` may be of this
   * container (format/inode.ts madeHere), after every checkpoint this handle knows and
   * its making (a checkpoint's modification time never goes below the one it is built
   * on). Clocks of different machines may disagree: an object made within that
   * disagreement of the last checkpoint passes.
   */
  madeHere(ctimeMs: number): boolean {
    return madeHere(ctimeMs, this.ctimeMs, Math.max(this.published.mtimeMs, this.base.mtimeMs, this.createdMs))
  }

  private readonly createdMs = Date.now()

  context(cno: number, part: number, flags: number, inode?: Inode): ObjectContext {
    return {
      cno,
      part,
      flags,
      format: this.format,
      dataShift: this.dataShift,
      metaShift: this.metaShift,
      baseInode: this.published,
      inode: inode ?? this.inodeNow(cno),
    }
  }

  /**
   * Takes in a completed object: blocks still as sent become stored, leaves still as
   * stored become clean. Returns the bytes of data blocks that died (written again
   * before the object completed).
   */
  applyStored(plan: StoredObject): number {
    const { cno, part } = plan.ctx
    this.storedAbove.add(cno * (MAX_PART + 1) + part)
    let dead = 0
    // Blocks in key order walk a leaf entry by entry: the tree is descended once per leaf.
    let leaf: MapNode | undefined
    let i = -1
    for (let k = 0; k < plan.dataBlocks; k++) {
      const slot = plan.slot[k] as number
      const key = plan.blockIndex[k] as number
      if (leaf !== undefined && i + 1 < leaf.count && leaf.keys[i + 1] === key) i++
      else {
        leaf = this.map.leafAt(key)
        i = leaf === undefined ? -1 : leaf.search(key)
      }
      if (leaf !== undefined && i >= 0 && leaf.hi[i] === 0 && leaf.lo[i] === DIRTY_BASE + slot && plan.unchanged(k)) {
        leaf.hi[i] = cno
        leaf.lo[i] = plan.dataLo(k)
        leaf.dirtyCount--
        this.tier.release(slot)
        continue
      }
      dead += this.blockSize
    }
    plan.images.forEach((im, j) => {
      const n = im.node
      // An index node whose child changed after the object was built (a write while part 0
      // uploads in the background) keeps its entries, yet must be written again.
      if (!sameEntries(n, im) || hasDirtyChild(n)) return
      if (n === this.map.root) return
      this.map.setStored(n, cno, plan.metaLo(j))
    })
    this.map.trimCache()
    return dead
  }

  /** Reads one block-map node from storage, checked against what its parent says. */
  private loadNode(
    hi: number,
    lo: number,
    expect: { level: number; minKey: number; maxKeyExclusive: number },
  ): Promise<BlockMapNode> {
    const { store, regions, settings } = this
    return readNode(store, regions, hi, lo, settings.metaBlockSize, { ...expect, maxCno: this.maxCno }, this.signal)
  }
}

function hasDirtyChild(n: MapNode): boolean {
  for (let i = 0; i < n.count; i++) if (n.children?.[i]?.dirty) return true
  return false
}

function sameEntries(n: MapNode, im: { level: number; keys: Uint32Array; hi: Uint32Array; lo: Uint32Array }): boolean {
  if (n.level !== im.level || n.count !== im.keys.length) return false
  for (let i = 0; i < n.count; i++) {
    if (n.keys[i] !== im.keys[i] || n.hi[i] !== im.hi[i] || n.lo[i] !== im.lo[i]) return false
  }
  return true
}
