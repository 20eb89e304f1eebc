/**
 * The dirty tier: bytes written by value and not yet stored, in pooled slabs.
 *
 * - Bytes are copied once, on intake, into a slot of a slab (a large Buffer filled once
 *   when allocated, so its pages are faulted in before the hot path touches them). Slabs
 *   come from the process's slab pool and go back to it when the tier clears
 *   (slab-pool.ts), so the next file's tier finds its pages faulted in already.
 *   Slots are plain numbers; per-slot state lives in typed arrays, never in one JS
 *   object per block.
 * - Uploads send views of the slabs, not copies. While a request carrying a slot is in
 *   flight the slot is pinned, and its bytes must not change: a write to a block whose
 *   slot is pinned takes a fresh slot (copy-on-write) and the old one is freed when the
 *   request ends. An unpinned slot is rewritten in place.
 * - Every write bumps the slot's generation. When an object completes, a block in it
 *   becomes clean only if it still maps to the slot it was sent from, at the generation
 *   it was sent with (a multipart piece unpins its slots when its request ends, long
 *   before the object completes).
 * - Placement: when an object takes a slot, the slot records which object holds its
 *   current generation and at which pointer (`place`). A block is unsent while no object
 *   in flight holds its current bytes; `unplacedBytes` counts those, and is what sending
 *   ahead sends. A write after placement, or the object failing (`unplace`), makes the
 *   block unsent again.
 * - Blocks written by reference (`allocRef`) take an id from pages without a slab: they
 *   hold no bytes, only a source and a position; their bytes are read on demand
 *   (`readRef`), when the object holding them is sent or a read needs them. They do not
 *   count in `usedBytes` (the dirty limits do not apply to them), but do in
 *   `unplacedBytes` (they are sent ahead like the rest).
 * - A slot is free when no block maps to it (`release`) and no request pins it.
 *   `usedBytes` counts every slot that is not free: a block stays in the tier, and counts
 *   against the dirty limit, until the object holding it has completed.
 * - Whole blocks of a caller's buffer may be adopted (`adoptRun`) instead of copied: a page
 *   of ids whose "slab" is the caller's bytes, never written (a rewrite copies on write),
 *   let go once none of its slots is live. The caller must not change them meanwhile.
 * - Slots are handed out as runs (`allocRun`): next fit over a bitmap of free slots, from
 *   a cursor that moves up the slabs and wraps around. Where a run lands depends only on
 *   which slots are free, never on the order they were freed in, so a stream whose
 *   objects complete out of order still gets its blocks side by side, and an object's
 *   bytes go out as a few slab-sized views, not one view per block.
 */

import { StreamSegmentError } from '../errors.js'
import { crc32, crc32Blocks, crc32HashesRuns } from '../util/crc32.js'
import { grownArray } from '../util/typed-arrays.js'
import { giveSlabs, takeSlab } from './slab-pool.js'

const SLAB_BYTES = 4 * 1024 * 1024
/** The bytes of a page of adopted bytes let go (its ids are unmapped until used again). */
const NO_BYTES = Buffer.alloc(0)
/** Bytes copied before they are hashed: small enough to stay in the CPU cache. */
const CACHE_STEP = 64 * 1024

/**
 * A plain view of each block of a slab, made once and kept with the slab (a pooled slab
 * brings its views to the next tier, remade if its block size differs). The CRC calls
 * take a view per block; one made per block written was most of what the write path
 * allocated (27 of 39 MB of garbage per GiB streamed, now 14 in all).
 */
const slotViewCache = new WeakMap<Buffer, readonly Uint8Array[]>()

function slotViewsOf(slab: Buffer, blockSize: number): readonly Uint8Array[] {
  const kept = slotViewCache.get(slab)
  if (kept !== undefined && kept[0]?.byteLength === blockSize) return kept
  const views: Uint8Array[] = []
  for (let at = 0; at + blockSize <= slab.byteLength; at += blockSize) {
    views.push(new Uint8Array(slab.buffer, slab.byteOffset + at, blockSize))
  }
  slotViewCache.set(slab, views)
  return views
}

/**
 * Where blocks written by reference get their bytes: the bytes at `position` of some
 * file or object, on demand. Contract: from `writeRef` until the flush that publishes the
 * checkpoint returns, it gives the bytes as they were at `writeRef`.
 */
export interface BlockSource {
  read(position: number, length: number): Promise<Uint8Array>
  /**
   * Optional: resolves when the source still gives the bytes it gave when first read,
   * and rejects with ERR_STATE when it changed (a file rewritten in place). A flush calls
   * it after its last read of the source and before it publishes.
   */
  verify?(): Promise<void>
  /**
   * Optional: the writer is done with bytes `read` gave it for an upload (their request
   * has ended, or they were only hashed), and reads them no more: the source may read
   * into their memory again. Bytes read for a caller of `SegmentFile.read` are never
   * given back.
   */
  release?(bytes: Uint8Array): void
}

export class DirtyTier {
  readonly blockSize: number
  private readonly slotsPerSlab: number
  private readonly slabShift: number
  /** Pages of ids: a slab for byte slots, or undefined for a page of references. */
  private slabs: Array<Buffer | undefined> = []
  /** Per byte slab, a view of each of its slots (slotViewsOf); undefined for other pages. */
  private slotViews: Array<readonly Uint8Array[] | undefined> = []
  /** One bit per id, set while the slot is free (byte slots only). */
  private freeBits = new Uint32Array(32)
  /** Free slots per page, and in all; where the next allocation starts looking. */
  private slabFree: number[] = []
  private freeCount = 0
  private cursor = 0
  /** The length of the run `allocRun` or `adoptRun` returned last. */
  lastRun = 0
  /** Per page: −1 for a slab or a page of references; for a page of adopted bytes, its live slots. */
  private adoptLive: number[] = []
  /** Pages of adopted bytes whose slots are all free, to be used again. */
  private freeAdoptPages: number[] = []
  private freeRefs = new Int32Array(1024)
  private freeRefCount = 0
  /** References: the source and the position in it of the block's first byte. */
  private refSource = new Uint32Array(1024)
  private refPos = new Float64Array(1024)
  /**
   * The sources references read from, by index, each with its live references: a source
   * goes once none is left (its blocks stored or rewritten), so a handle that writes by
   * reference from one source after another, flushing between, holds only the current
   * ones (a fileSource keeps up to 64 MiB of read buffers).
   */
  private sources: Array<BlockSource | undefined> = []
  private sourceRefs: number[] = []
  private freeSources: number[] = []
  private sourceIds = new Map<BlockSource, number>()
  private generation = new Uint32Array(1024)
  /** Requests in flight carrying the slot. */
  private pins = new Uint16Array(1024)
  /** 1 while a block maps to the slot. */
  private mapped = new Uint8Array(1024)
  /** The generation an object in flight holds (0: none), which object, and where. */
  private placedGen = new Uint32Array(1024)
  private placedIn = new Uint32Array(1024)
  private placedHi = new Uint32Array(1024)
  private placedLo = new Uint32Array(1024)
  private unplaced = 0
  /**
   * Events that may make a mapped slot's bytes unsent again: a slot taken, a write, an
   * object given up, a clear. Placing never counts: it only makes bytes sent.
   */
  unplacings = 0
  /** A CRC-32 of the slot's bytes, valid while crcGen equals the slot's generation. */
  private crcs = new Uint32Array(1024)
  private crcGen = new Uint32Array(1024)
  private allocated = 0
  /** Live ids of blocks written by reference. */
  private refs = 0

  constructor(blockSize: number) {
    this.blockSize = blockSize
    this.slotsPerSlab = Math.max(1, Math.floor(SLAB_BYTES / blockSize))
    this.slabShift = Math.log2(this.slotsPerSlab)
    this.adoptMinBlocks = Math.max(1, this.slotsPerSlab / 16)
  }

  /** Bytes held by allocated slots. */
  get usedBytes(): number {
    return this.allocated * this.blockSize
  }

  /** Blocks written by reference and not yet freed (stored, rewritten or cut): per-id state, no bytes. */
  get refBlocks(): number {
    return this.refs
  }

  /** A slot for one block, its bytes unspecified (the caller fills all of them). */
  alloc(): number {
    return this.allocRun(1)
  }

  /**
   * Slots first … first + lastRun − 1 of one slab, 1 ≤ lastRun ≤ max, their bytes
   * unspecified: the first free slot at or after the cursor (wrapping around), and the
   * free slots right after it.
   */
  allocRun(max: number): number {
    if (this.freeCount === 0) this.grow(true)
    const first = this.findFree()
    const sps = this.slotsPerSlab
    const end = Math.min(first + max, (Math.floor(first / sps) + 1) * sps)
    const bits = this.freeBits
    let s = first
    do {
      bits[s >>> 5] = (bits[s >>> 5] as number) & ~(1 << (s & 31))
      this.taken(s)
      s++
    } while (s < end && ((bits[s >>> 5] as number) & (1 << (s & 31))) !== 0)
    const n = s - first
    const page = Math.floor(first / sps)
    this.slabFree[page] = (this.slabFree[page] as number) - n
    this.freeCount -= n
    this.allocated += n
    this.cursor = s < this.slabs.length * sps ? s : 0
    this.lastRun = n
    return first
  }

  /**
   * The fewest whole blocks `adoptRun` takes: an adopted run has a page of ids to itself,
   * and per-id state costs ~45 bytes, so short runs are copied instead (tests lower it).
   */
  adoptMinBlocks: number

  /**
   * Takes whole blocks of the caller's bytes as they are, without copying: `count` blocks
   * of `src` from byte `from` (at most a page's worth; `lastRun` says how many), as slots
   * first … first + lastRun − 1 whose bytes are `src`'s. The caller gave them up: they
   * must not change while a block maps to them (the Writable rule). Their CRC-32s are
   * computed now. They are never written (`frozen`): a rewrite takes a fresh slot. They
   * count in `usedBytes` like any slot, until the object holding them completes.
   */
  adoptRun(src: Uint8Array, from: number, count: number): number {
    const sps = this.slotsPerSlab
    const bs = this.blockSize
    const n = Math.min(count, sps)
    const view = Buffer.from(src.buffer, src.byteOffset + from, n * bs)
    let page = this.freeAdoptPages.pop()
    if (page === undefined) {
      page = this.slabs.length
      this.slabs.push(view)
      this.slotViews.push(undefined)
      this.slabFree[page] = 0
      this.reserveIds((page + 1) * sps)
    } else this.slabs[page] = view
    this.adoptLive[page] = n
    const first = page * sps
    for (let s = first; s < first + n; s++) this.taken(s)
    this.allocated += n
    crc32Blocks(view, bs, this.crcs.subarray(first, first + n))
    this.crcGen.set(this.generation.subarray(first, first + n), first)
    this.lastRun = n
    return first
  }

  /** Whether the slot holds adopted bytes, which are never written. */
  frozen(slot: number): boolean {
    return (this.adoptLive[slot >>> this.slabShift] as number) >= 0
  }

  /** The first free slot at or after the cursor, wrapping around (one exists). */
  private findFree(): number {
    const sps = this.slotsPerSlab
    const pages = this.slabs.length
    const start = Math.floor(this.cursor / sps)
    for (let i = 0; i <= pages; i++) {
      const page = (start + i) % pages
      if (this.slabs[page] === undefined || this.slabFree[page] === 0) continue
      const from = i === 0 ? this.cursor : page * sps
      const id = this.nextFree(from, (page + 1) * sps)
      if (id >= 0) return id
    }
    throw StreamSegmentError.internal(`dirty tier counts ${this.freeCount} free slots and finds none`)
  }

  /** The first free slot in [from, end), or −1. */
  private nextFree(from: number, end: number): number {
    const bits = this.freeBits
    let w = from >>> 5
    let word = (bits[w] as number) & (-1 << (from & 31))
    for (;;) {
      if (word !== 0) {
        const id = (w << 5) + 31 - Math.clz32(word & -word)
        return id < end ? id : -1
      }
      w++
      if (w << 5 >= end) return -1
      word = bits[w] as number
    }
  }

  /** An id for a block written by reference: its bytes are `source`'s at `position`. */
  allocRef(source: BlockSource, position: number): number {
    if (this.freeRefCount === 0) this.grow(false)
    const id = this.freeRefs[--this.freeRefCount] as number
    let s = this.sourceIds.get(source)
    if (s === undefined) {
      s = this.freeSources.pop() ?? this.sources.length
      this.sources[s] = source
      this.sourceRefs[s] = 0
      this.sourceIds.set(source, s)
    }
    this.sourceRefs[s] = (this.sourceRefs[s] as number) + 1
    this.refs++
    this.refSource[id] = s
    this.refPos[id] = position
    this.taken(id)
    return id
  }

  /**
   * Ids for up to `max` consecutive blocks written by reference, the first at `position`
   * of `source`: ids first … first + lastRun − 1, as many as come in a row.
   */
  allocRefRun(source: BlockSource, position: number, max: number): number {
    const first = this.allocRef(source, position)
    const s = this.refSource[first] as number
    const bs = this.blockSize
    let n = 1
    while (
      n < max &&
      this.freeRefCount > 0 &&
      this.freeRefs[this.freeRefCount - 1] === first + n &&
      ((first + n) & (this.slotsPerSlab - 1)) !== 0
    ) {
      this.freeRefCount--
      this.sourceRefs[s] = (this.sourceRefs[s] as number) + 1
      this.refs++
      this.refSource[first + n] = s
      this.refPos[first + n] = position + n * bs
      this.taken(first + n)
      n++
    }
    this.lastRun = n
    return first
  }

  isRef(id: number): boolean {
    return this.slabs[id >>> this.slabShift] === undefined
  }

  /** Whether reference `next` is the block right after reference `id`'s in the same source. */
  refFollows(id: number, next: number): boolean {
    return (
      this.refSource[next] === this.refSource[id] && this.refPos[next] === (this.refPos[id] as number) + this.blockSize
    )
  }

  /** The source of reference `id`, and the position of its block in it. */
  refOf(id: number): { source: BlockSource; position: number } {
    return { source: this.sources[this.refSource[id] as number] as BlockSource, position: this.refPos[id] as number }
  }

  /** Bytes [at, at + length) of the block of reference `id`, from its source, checked for length. */
  async readRef(id: number, at: number, length: number): Promise<Uint8Array> {
    const { source, position } = this.refOf(id)
    return readSource(source, position + at, length)
  }

  private taken(slot: number): void {
    this.unplacings++
    this.mapped[slot] = 1
    this.generation[slot] = ((this.generation[slot] as number) + 1) >>> 0
    this.placedGen[slot] = 0
    this.placedIn[slot] = 0
    this.unplaced++
  }

  /** No block maps to `slot` any more; it is freed once no request pins it. */
  release(slot: number): void {
    // Freeing a slot twice would hand it to two blocks.
    if (this.mapped[slot] !== 1) throw StreamSegmentError.internal(`dirty-tier slot ${slot} released twice`)
    if (!this.placed(slot)) this.unplaced--
    this.mapped[slot] = 0
    if (this.pins[slot] === 0) this.free(slot)
  }

  /** Whether a block maps to `slot` still (a block written again while its slot was pinned moved to a fresh one). */
  isMapped(slot: number): boolean {
    return this.mapped[slot] === 1
  }

  pinned(slot: number): boolean {
    return this.pins[slot] !== 0
  }

  pin(slot: number): void {
    if (this.mapped[slot] === 0 && this.pins[slot] === 0) {
      throw StreamSegmentError.internal(`dirty-tier slot ${slot} is free: nothing may send it`)
    }
    this.pins[slot] = (this.pins[slot] as number) + 1
  }

  unpin(slot: number): void {
    const n = (this.pins[slot] as number) - 1
    this.pins[slot] = n
    if (n === 0 && this.mapped[slot] === 0) this.free(slot)
  }

  private free(slot: number): void {
    if (this.isRef(slot)) {
      if (this.freeRefCount === this.freeRefs.length)
        this.freeRefs = grownArray(this.freeRefs, new Int32Array(this.freeRefs.length * 2))
      this.freeRefs[this.freeRefCount++] = slot
      this.dropReference(this.refSource[slot] as number)
      return
    }
    const page = slot >>> this.slabShift
    const live = this.adoptLive[page] as number
    if (live >= 0) {
      // Adopted bytes: the page is let go (and its ids used again) once none is live.
      this.adoptLive[page] = live - 1
      this.allocated--
      if (live === 1) {
        this.slabs[page] = NO_BYTES
        this.freeAdoptPages.push(page)
      }
      return
    }
    this.freeBits[slot >>> 5] = (this.freeBits[slot >>> 5] as number) | (1 << (slot & 31))
    this.slabFree[page] = (this.slabFree[page] as number) + 1
    this.freeCount++
    this.allocated--
  }

  /** A reference to source `s` was freed: the source goes with its last one. */
  private dropReference(s: number): void {
    this.refs--
    const left = (this.sourceRefs[s] as number) - 1
    this.sourceRefs[s] = left
    if (left > 0) return
    this.sourceIds.delete(this.sources[s] as BlockSource)
    this.sources[s] = undefined
    this.freeSources.push(s)
  }

  gen(slot: number): number {
    return this.generation[slot] as number
  }

  /** The slab holding `slot`, and the slot's byte offset in it. */
  slab(slot: number): Buffer {
    const slab = this.slabs[slot >>> this.slabShift]
    if (slab === undefined) throw StreamSegmentError.internal(`dirty-tier id ${slot} is a reference, not a slot`)
    return slab
  }

  offset(slot: number): number {
    return (slot & (this.slotsPerSlab - 1)) * this.blockSize
  }

  /** Copies `src` into the slot at `at`, and marks the slot's content as changed. */
  write(slot: number, at: number, src: Uint8Array): void {
    this.slab(slot).set(src, this.offset(slot) + at)
    this.bump(slot)
  }

  /**
   * Copies `count` whole blocks from `src` at `from` into slots first … first + count − 1
   * of one slab, and hashes each block right after copying it, while it is in the CPU
   * cache: a stream's blocks are written once, so their CRC is then ready when they are
   * sent (`crcOf`), instead of costing a second pass over cold memory.
   */
  writeRun(first: number, count: number, src: Uint8Array, from: number): void {
    const bs = this.blockSize
    const slab = this.slab(first)
    const views = this.slotViews[first >>> this.slabShift] as readonly Uint8Array[]
    const at = first & (this.slotsPerSlab - 1)
    // Plain views: a Buffer's subarray makes a FastBuffer, several times the cost of a
    // Uint8Array's.
    const run = new Uint8Array(slab.buffer, slab.byteOffset + at * bs, count * bs)
    const input = new Uint8Array(src.buffer, src.byteOffset + from, count * bs)
    const step = Math.max(1, Math.floor(CACHE_STEP / bs))
    // One call per step when the CRC implementation takes runs, else one per block.
    const batched = crc32HashesRuns && step > 1
    for (let i = 0; i < count; i += step) {
      const m = Math.min(step, count - i)
      run.set(input.subarray(i * bs, (i + m) * bs), i * bs)
      if (batched) crc32Blocks(run.subarray(i * bs, (i + m) * bs), bs, this.crcs.subarray(first + i, first + i + m))
      for (let j = i; j < i + m; j++) {
        const s = first + j
        this.bump(s)
        if (!batched) this.crcs[s] = crc32(views[at + j] as Uint8Array)
        this.crcGen[s] = this.generation[s] as number
      }
    }
  }

  /** The CRC-32 of the slot's bytes (computed now unless known for its current generation). */
  crcOf(slot: number): number {
    const g = this.generation[slot] as number
    if (this.crcGen[slot] === g && g !== 0) return this.crcs[slot] as number
    const views = this.slotViews[slot >>> this.slabShift]
    const so = this.offset(slot)
    const c = crc32(
      views !== undefined
        ? (views[slot & (this.slotsPerSlab - 1)] as Uint8Array)
        : this.slab(slot).subarray(so, so + this.blockSize),
    )
    this.crcs[slot] = c
    this.crcGen[slot] = g
    return c
  }

  copySlot(from: number, to: number): void {
    const so = this.offset(from)
    this.slab(from).copy(this.slab(to), this.offset(to), so, so + this.blockSize)
    this.bump(to)
  }

  /** Whether slot `next` follows slot `prev` in the same slab. */
  follows(prev: number, next: number): boolean {
    return next === prev + 1 && (next & (this.slotsPerSlab - 1)) !== 0 && !this.isRef(next)
  }

  fill(slot: number, at: number, length: number, value = 0): void {
    const off = this.offset(slot) + at
    this.slab(slot).fill(value, off, off + length)
    this.bump(slot)
  }

  /**
   * Frees every slab (the handle is closing or rolling back; nothing may be in flight):
   * byte slabs none of whose slots is pinned go to the process's slab pool.
   */
  clear(): void {
    const sps = this.slotsPerSlab
    const mine: Buffer[] = []
    this.slabs.forEach((slab, page) => {
      if (slab === undefined || this.adoptLive[page] !== -1) return // references, adopted bytes
      for (let s = page * sps; s < (page + 1) * sps; s++) if (this.pins[s] !== 0) return
      mine.push(slab)
    })
    giveSlabs(mine)
    this.slabs = []
    this.slotViews = []
    this.slabFree = []
    this.adoptLive = []
    this.freeAdoptPages = []
    this.freeBits.fill(0)
    this.freeCount = 0
    this.cursor = 0
    this.allocated = 0
    this.freeRefCount = 0
    this.refs = 0
    this.sources = []
    this.sourceRefs = []
    this.freeSources = []
    this.sourceIds.clear()
    this.pins.fill(0)
    this.mapped.fill(0)
    this.placedGen.fill(0)
    this.placedIn.fill(0)
    this.unplaced = 0
    this.unplacings++
  }

  /** The slot's bytes changed: a new generation, and no longer what any object holds. */
  private bump(slot: number): void {
    this.unplacings++
    if (this.mapped[slot] === 1 && this.placed(slot)) this.unplaced++
    this.generation[slot] = ((this.generation[slot] as number) + 1) >>> 0
  }

  // --- placement: which object (in flight) holds a slot's current bytes ---

  /** Bytes of mapped slots whose current bytes no object in flight holds: what is unsent. */
  get unplacedBytes(): number {
    return this.unplaced * this.blockSize
  }

  /** Whether an object in flight holds the slot's current bytes. */
  placed(slot: number): boolean {
    return this.placedGen[slot] !== 0 && this.placedGen[slot] === this.generation[slot]
  }

  /** The object (an id of the caller's) that last took this slot, whatever its bytes since. */
  placedObject(slot: number): number {
    return this.placedIn[slot] as number
  }

  /** Records that object `id` holds the slot's current bytes, at the pointer (hi, lo). */
  place(slot: number, id: number, hi: number, lo: number): void {
    if (this.mapped[slot] === 1 && !this.placed(slot)) this.unplaced--
    this.placedGen[slot] = this.generation[slot] as number
    this.placedIn[slot] = id
    this.placedHi[slot] = hi
    this.placedLo[slot] = lo
  }

  /** The object holding the slot failed or was given up: its bytes are unsent again. */
  unplace(slot: number, id: number): void {
    if (this.placedIn[slot] !== id) return
    this.unplacings++
    if (this.mapped[slot] === 1 && this.placed(slot)) this.unplaced++
    this.placedGen[slot] = 0
    this.placedIn[slot] = 0
  }

  placedPointerHi(slot: number): number {
    return this.placedHi[slot] as number
  }

  placedPointerLo(slot: number): number {
    return this.placedLo[slot] as number
  }

  /** Per-id state for ids below `need`. */
  private reserveIds(need: number): void {
    if (this.generation.length < need) {
      const n = Math.max(need, this.generation.length * 2)
      this.generation = grownArray(this.generation, new Uint32Array(n))
      this.pins = grownArray(this.pins, new Uint16Array(n))
      this.mapped = grownArray(this.mapped, new Uint8Array(n))
      this.crcs = grownArray(this.crcs, new Uint32Array(n))
      this.crcGen = grownArray(this.crcGen, new Uint32Array(n))
      this.placedGen = grownArray(this.placedGen, new Uint32Array(n))
      this.placedIn = grownArray(this.placedIn, new Uint32Array(n))
      this.placedHi = grownArray(this.placedHi, new Uint32Array(n))
      this.placedLo = grownArray(this.placedLo, new Uint32Array(n))
      this.refSource = grownArray(this.refSource, new Uint32Array(n))
      this.refPos = grownArray(this.refPos, new Float64Array(n))
    }
  }

  /** Adds a page of ids: a pre-faulted slab of byte slots, or a page of references. */
  private grow(bytes: boolean): void {
    const index = this.slabs.length
    if (bytes) {
      const slab = takeSlab(this.slotsPerSlab * this.blockSize)
      this.slabs.push(slab)
      this.slotViews.push(slotViewsOf(slab, this.blockSize))
    } else {
      this.slabs.push(undefined)
      this.slotViews.push(undefined)
    }
    this.adoptLive[index] = -1
    const first = index * this.slotsPerSlab
    const need = first + this.slotsPerSlab
    this.reserveIds(need)
    if (bytes) {
      if (this.freeBits.length * 32 < need) {
        this.freeBits = grownArray(
          this.freeBits,
          new Uint32Array(Math.max(Math.ceil(need / 32), this.freeBits.length * 2)),
        )
      }
      for (let s = first; s < need; s++) this.freeBits[s >>> 5] = (this.freeBits[s >>> 5] as number) | (1 << (s & 31))
      this.slabFree[index] = this.slotsPerSlab
      this.freeCount += this.slotsPerSlab
      this.cursor = first
    } else {
      this.slabFree[index] = 0
      if (this.freeRefs.length < this.freeRefCount + this.slotsPerSlab) {
        this.freeRefs = grownArray(
          this.freeRefs,
          new Int32Array(Math.max(this.freeRefCount + this.slotsPerSlab, this.freeRefs.length * 2)),
          this.freeRefCount,
        )
      }
      for (let s = need - 1; s >= first; s--) this.freeRefs[this.freeRefCount++] = s
    }
  }
}

/**
 * `length` bytes at `position` of a source; a short or long answer is ERR_STATE (the source
 * broke its contract). A source of the caller's that fails with an error of its own (an
 * Error from its disk, say) fails as fileSource's reads do, ERR_STORE with it as the cause:
 * thrown as it was, it would be taken for a bug of the library's and make the handle
 * unusable, its unflushed writes lost.
 */
export async function readSource(source: BlockSource, position: number, length: number): Promise<Uint8Array> {
  let bytes: Uint8Array
  try {
    bytes = await source.read(position, length)
  } catch (err) {
    if (StreamSegmentError.is(err)) throw err
    throw StreamSegmentError.store(
      `block source: reading ${length} bytes at ${position} failed: ${(err as Error)?.message ?? err}`,
      err,
    )
  }
  if (!(bytes instanceof Uint8Array) || bytes.byteLength !== length) {
    throw StreamSegmentError.state(
      `block source gave ${bytes instanceof Uint8Array ? `${bytes.byteLength} bytes` : typeof bytes} for ${length} at ${position}`,
    )
  }
  return bytes
}
