/**
 * Builds one segment object from dirty leaves: `[data][meta][summary][header]` in a
 * StreamSegment container, `[header][summary][meta][data]` in a PartedSegment one.
 *
 * - A leaf never leaves its data: every dirty block under a chosen leaf goes into the
 *   object with the leaf. Data blocks are placed in leaf order, so block k sits at
 *   `k × dataBlockSize` and its pointer (cno, part, unit) is final at planning time.
 * - Meta blocks follow: the chosen leaves, then (part 0) the index nodes, children
 *   before parents; each node's planned location is kept on the plan until the object
 *   is stored, and only then given to the block map.
 * - Bytes are handed out by `take(offset, end)`, in order, a piece at a time, as views
 *   of the dirty-tier slabs (nothing is copied): the slots stay pinned until the request
 *   carrying them ends, so a write meanwhile goes to a fresh slot (see dirty-tier.ts).
 *   Each block's generation and CRC-32 are recorded when its piece is taken. The summary
 *   and header are encoded once every data block has been taken (they come last): a
 *   block written again by then is marked dead there.
 * - A PartedSegment object's header and summary come first, so the whole object is
 *   built before its first byte is taken: every data block is placed and its CRC-32
 *   recorded then, its slot pinned until the last request carrying the object ends
 *   (every slot is live in its summary). A block written by reference is read from its
 *   source then for its CRC only, and read again when its bytes are taken, checked
 *   against that CRC (a source that changed is ERR_STATE): memory stays at the pieces
 *   in flight, as in a StreamSegment object.
 */

import type { Uploadable } from '../container/uploader.js'
import { StreamSegmentError } from '../errors.js'
import { type ObjectLayout, objectLayout } from '../format/header.js'
import { FORMAT_PARTED } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import { encodeNode } from '../format/node.js'
import { encodeObjectHead, encodeObjectTail, type TailFields } from '../format/object.js'
import { pointerLo, UNIT_BYTES } from '../format/pointer.js'
import { dirtyLimit } from '../settings.js'
import { DIRTY_BASE, isDirtyRef, type MapNode } from '../state/block-map.js'
import { type BlockSource, type DirtyTier, readSource } from '../state/dirty-tier.js'
import type { FileState, NodeImage, ObjectContext } from '../state/file-state.js'
import { sliceChunks } from '../util/chunks.js'
import { crc32Blocks } from '../util/crc32.js'
import { grownArray } from '../util/typed-arrays.js'

let nextObjectId = 1

export function newObjectId(): number {
  return nextObjectId++
}

/**
 * The data blocks an object filled a piece at a time already sent (send-ahead.ts), in
 * object order, with the generation and CRC-32 each was sent with (set as its piece is
 * taken): typed arrays grown by doubling, the first `count` entries in use.
 */
export class SentBlocks {
  count = 0
  blockIndex = new Uint32Array(1024)
  slot = new Int32Array(1024)
  gen = new Uint32Array(1024)
  crc = new Uint32Array(1024)

  /** `id`: the object's id in the dirty tier's placement records. */
  constructor(readonly id: number) {}

  /** Room for `need` entries in every array (they double until they have it). */
  reserve(need: number): void {
    if (need <= this.slot.length) return
    let size = this.slot.length
    while (size < need) size *= 2
    this.blockIndex = grownArray(this.blockIndex, new Uint32Array(size), this.count)
    this.slot = grownArray(this.slot, new Int32Array(size), this.count)
    this.gen = grownArray(this.gen, new Uint32Array(size), this.count)
    this.crc = grownArray(this.crc, new Uint32Array(size), this.count)
  }

  /** Appends the blocks keys[0…n), in slots slots[0…n). */
  append(keys: Uint32Array, slots: Int32Array, n: number): void {
    const need = this.count + n
    this.reserve(need)
    this.blockIndex.set(keys.subarray(0, n), this.count)
    this.slot.set(slots.subarray(0, n), this.count)
    this.count = need
  }
}

export class ObjectPlan {
  /** This object's id in the dirty tier's placement records. */
  readonly id: number
  readonly key: string
  readonly layout: ObjectLayout
  /** Per data block, in object order. */
  readonly blockIndex: Uint32Array
  readonly slot: Int32Array
  readonly gen: Uint32Array
  readonly crc: Uint32Array
  /** Meta blocks in object order: leaves, then index nodes (part 0), as they will be stored. */
  readonly images: NodeImage[]
  private meta: Uint8Array | undefined
  private tail: Uint8Array | undefined
  private taken = 0
  /** PartedSegment: the header, summary and padding, once built; requests still carrying the object. */
  private head: Uint8Array | undefined
  private carrying = 0
  private finished = false
  private unpinAll: (() => void) | undefined

  constructor(
    readonly ctx: ObjectContext,
    readonly tier: DirtyTier,
    leaves: readonly MapNode[],
    index: readonly MapNode[] = [],
    /** Part 0 of a checkpoint with a level-0 root: the root's own dirty blocks go here. */
    rootLeaf?: MapNode,
    /** The blocks this object already sent, when it was filled a piece at a time. */
    prefix?: SentBlocks,
  ) {
    this.id = prefix?.id ?? newObjectId()
    this.key = segmentKey(ctx.cno, ctx.part)
    const nodes = [...leaves, ...index]
    // The blocks this object carries: those it sent already, then the unsent dirty blocks
    // under its leaves. Dirty blocks that an object in flight holds (this one included)
    // are pointed at where that object put them.
    const p = prefix?.count ?? 0
    let n = p + (rootLeaf ? unsentUnder(rootLeaf, tier) : 0)
    for (const leaf of leaves) n += unsentUnder(leaf, tier)
    this.layout = objectLayout({ dataCount: n, metaCount: nodes.length }, ctx)
    if (prefix !== undefined) {
      // The plan takes the sent blocks' arrays over, grown to hold the rest if they must
      // (nothing appends to them once their object closes), instead of copying them.
      prefix.reserve(n)
      this.blockIndex = prefix.blockIndex.subarray(0, n)
      this.slot = prefix.slot.subarray(0, n)
      this.gen = prefix.gen.subarray(0, n)
      this.crc = prefix.crc.subarray(0, n)
    } else {
      this.blockIndex = new Uint32Array(n)
      this.slot = new Int32Array(n)
      this.gen = new Uint32Array(n)
      this.crc = new Uint32Array(n)
    }
    this.taken = p * this.layout.dataBlockSize
    const planned = new Map<MapNode, number>()
    nodes.forEach((node, j) => {
      planned.set(node, this.metaLo(j))
    })
    let k = p
    const placeData = (node: MapNode, hi: Uint32Array, lo: Uint32Array) => {
      for (let i = 0; i < node.count; i++) {
        const l = node.lo[i] as number
        if (!isDirtyRef(node.hi[i] as number, l)) continue
        const slot = l - DIRTY_BASE
        if (tier.placed(slot)) {
          hi[i] = tier.placedPointerHi(slot)
          lo[i] = tier.placedPointerLo(slot)
          continue
        }
        this.blockIndex[k] = node.keys[i] as number
        this.slot[k] = slot
        hi[i] = ctx.cno
        lo[i] = this.dataLo(k++)
      }
    }
    this.images = nodes.map((node) => {
      const hi = node.hi.slice(0, node.count)
      const lo = node.lo.slice(0, node.count)
      if (node.level === 0) placeData(node, hi, lo)
      else {
        for (let i = 0; i < node.count; i++) {
          const child = node.children?.[i]
          if (!child?.dirty) continue
          const at = planned.get(child)
          if (at === undefined)
            throw StreamSegmentError.internal(`${this.key}: a dirty child of an index node is not placed`)
          hi[i] = ctx.cno
          lo[i] = at
        }
      }
      return { node, level: node.level, keys: node.keys.slice(0, node.count), hi, lo }
    })
    if (rootLeaf) placeData(rootLeaf, new Uint32Array(rootLeaf.count), new Uint32Array(rootLeaf.count))
    if (k !== n) throw StreamSegmentError.internal(`${this.key}: leaves count ${n} dirty blocks, found ${k}`)
  }

  get size(): number {
    return this.layout.objectSize
  }

  get dataBlocks(): number {
    return this.blockIndex.length
  }

  /** The stored pointer of data block k: (cno, lo). */
  dataLo(k: number): number {
    return pointerLo(this.ctx.part, (this.layout.dataOffset + k * this.layout.dataBlockSize) / UNIT_BYTES)
  }

  /** The stored location of meta block j: (cno, lo). */
  metaLo(j: number): number {
    return pointerLo(this.ctx.part, (this.layout.metaOffset + j * this.layout.metaBlockSize) / UNIT_BYTES)
  }

  /** The pointer this object gives a node placed in it, if it is. */
  plannedLo(node: MapNode): number | undefined {
    const j = this.images.findIndex((im) => im.node === node)
    return j < 0 ? undefined : this.metaLo(j)
  }

  /**
   * The bytes [offset, end) of the object, as views: data blocks straight from their
   * slabs (a run of consecutive slots as one view), then nodes, summary and header. The
   * data slots in the range stay pinned, so their bytes cannot change, until `done` is
   * called when the request carrying them has ended. Each block's generation and CRC-32
   * are recorded here, from the very bytes that will be sent. Calls must cover the
   * object in order, from 0, without gaps; a range may not split a data block.
   */
  async take(offset: number, end: number): Promise<{ chunks: Uint8Array[]; done: () => void }> {
    if (offset !== this.taken)
      throw StreamSegmentError.internal(`${this.key}: take at ${offset}, expected ${this.taken}`)
    this.taken = end
    if (this.layout.format === FORMAT_PARTED) return this.takeParted(offset, end)
    const { metaOffset, summaryOffset, dataBlockSize: bs } = this.layout
    const dataEnd = Math.min(end, metaOffset)
    let at = offset
    let chunks: Uint8Array[] = []
    let done = () => {}
    if (at < dataEnd) {
      if (at % bs !== 0 || dataEnd % bs !== 0) {
        throw StreamSegmentError.internal(`${this.key}: range [${offset}, ${end}) splits a data block`)
      }
      const taken = await takeBlocks(this.tier, this.slot, at / bs, (dataEnd - at) / bs, (k, slot, crc) => {
        this.tier.place(slot, this.id, this.ctx.cno, this.dataLo(k))
        this.gen[k] = this.tier.gen(slot)
        this.crc[k] = crc
      })
      chunks = taken.chunks
      done = taken.done
      at = dataEnd
    }
    if (at < end && at < summaryOffset) {
      const meta = this.encodeMeta()
      const to = Math.min(summaryOffset, end)
      chunks.push(meta.subarray(at - metaOffset, to - metaOffset))
      at = to
    }
    if (at < end) {
      const tail = this.encodeTail()
      chunks.push(tail.subarray(at - summaryOffset, end - summaryOffset))
    }
    return { chunks, done }
  }

  /**
   * The whole object taken at once (a background publish): every data slot pinned until
   * `release`, so the object keeps the bytes of this moment whatever is written next (a
   * write to one of its blocks takes a fresh slot). `upload` hands out views of them, any
   * range any number of times (a piece sent again after a failure).
   */
  async snapshot(): Promise<{ upload: Uploadable; release: () => void }> {
    const whole = await this.take(0, this.size)
    const { key, size } = this
    const upload: Uploadable = {
      key,
      size,
      take: async (start, end) => ({ chunks: sliceChunks(whole.chunks, start, end), done: () => {} }),
    }
    return { upload, release: whole.done }
  }

  /** A PartedSegment object's bytes [offset, end): any range, the object built whole at the first. */
  private async takeParted(offset: number, end: number): Promise<{ chunks: Uint8Array[]; done: () => void }> {
    if (offset === 0) await this.buildParted()
    const { metaOffset, metaEnd, dataOffset, dataBlockSize: bs } = this.layout
    const head = this.head as Uint8Array
    const chunks: Uint8Array[] = []
    let at = offset
    if (at < Math.min(end, metaOffset)) {
      chunks.push(head.subarray(at, Math.min(end, metaOffset)))
      at = Math.min(end, metaOffset)
    }
    if (at < Math.min(end, metaEnd)) {
      chunks.push(this.encodeMeta().subarray(at - metaOffset, Math.min(end, metaEnd) - metaOffset))
      at = Math.min(end, metaEnd)
    }
    this.carrying++
    if (end === this.size) this.finished = true
    let done = () => {
      if (--this.carrying === 0 && this.finished) this.releaseParted()
    }
    if (at < end) {
      // Whole blocks from the slabs (pinned since the build) or from their source, trimmed to the range.
      const first = Math.floor((at - dataOffset) / bs)
      const last = Math.ceil((end - dataOffset) / bs)
      let data: Awaited<ReturnType<typeof takeBlocks>>
      try {
        data = await takeBlocks(this.tier, this.slot, first, last - first, (k, slot, crc) => {
          if (crc !== this.crc[k]) {
            throw StreamSegmentError.state(
              `${this.key}: block ${this.blockIndex[k]} changed in its source since it was written by reference (slot ${slot})`,
            )
          }
        })
      } catch (err) {
        done()
        throw err
      }
      // One by one, not push(...): blocks in no two neighbouring slots are a view each,
      // and an object may hold hundreds of thousands.
      const from = dataOffset + first * bs
      for (const c of sliceChunks(data.chunks, at - from, end - from)) chunks.push(c)
      const release = done
      done = () => {
        data.done()
        release()
      }
    }
    return { chunks, done }
  }

  /**
   * Places every data block, records its generation and CRC-32 (blocks by reference read
   * for it), pins the slots, and encodes the header and summary: every slot live.
   */
  private async buildParted(): Promise<void> {
    const n = this.blockIndex.length
    const pinned: number[] = []
    this.unpinAll = () => {
      for (const slot of pinned.splice(0)) this.tier.unpin(slot)
    }
    const bs = this.layout.dataBlockSize
    const refRun = Math.max(1, Math.floor(REF_CRC_RUN_BYTES / bs))
    for (let k = 0; k < n; ) {
      const slot = this.slot[k] as number
      if (!this.tier.isRef(slot)) {
        this.tier.pin(slot)
        pinned.push(slot)
        this.record(k, slot, this.tier.crcOf(slot))
        k++
        continue
      }
      let count = 1
      while (count < refRun && k + count < n && this.tier.isRef(this.slot[k + count] as number)) count++
      const taken = await takeBlocks(this.tier, this.slot, k, count, (j, s, crc) => this.record(j, s, crc))
      taken.done()
      k += count
    }
    const live = new Uint8Array(n).fill(1)
    this.head = encodeObjectHead(this.headerFields(), { count: n, blockIndex: this.blockIndex, live, crc: this.crc })
  }

  private record(k: number, slot: number, crc: number): void {
    this.tier.place(slot, this.id, this.ctx.cno, this.dataLo(k))
    this.gen[k] = this.tier.gen(slot)
    this.crc[k] = crc
  }

  private releaseParted(): void {
    this.unpinAll?.()
    this.unpinAll = undefined
  }

  /** The object failed or was given up: its blocks are unsent again (those not written since). */
  unplace(): void {
    this.finished = true
    if (this.carrying === 0) this.releaseParted()
    for (let k = 0; k < this.blockIndex.length; k++) this.tier.unplace(this.slot[k] as number, this.id)
  }

  /**
   * Whether data block k's slot still holds what was sent: its block maps to it still, at
   * the generation sent. A write while the slot was pinned moves the block to a fresh slot
   * and leaves the old one's generation as it was.
   */
  unchanged(k: number): boolean {
    const slot = this.slot[k] as number
    return this.tier.isMapped(slot) && this.tier.gen(slot) === this.gen[k]
  }

  private encodeMeta(): Uint8Array {
    if (this.meta) return this.meta
    const mbs = this.layout.metaBlockSize
    const out = new Uint8Array(this.images.length * mbs)
    this.images.forEach((im, j) => {
      encodeNode(out.subarray(j * mbs, (j + 1) * mbs), {
        level: im.level,
        count: im.keys.length,
        cno: this.ctx.cno,
        keys: im.keys,
        ptrHi: im.hi,
        ptrLo: im.lo,
      })
    })
    this.meta = out
    return out
  }

  /** Summary and header, once every data block was gathered: a block rewritten since is a dead slot. */
  private encodeTail(): Uint8Array {
    if (this.tail) return this.tail
    const n = this.blockIndex.length
    const live = new Uint8Array(n)
    for (let k = 0; k < n; k++) live[k] = this.unchanged(k) ? 1 : 0
    this.tail = encodeObjectTail(this.headerFields(), { count: n, blockIndex: this.blockIndex, live, crc: this.crc })
    return this.tail
  }

  private headerFields(): TailFields {
    return {
      format: this.ctx.format,
      flags: this.ctx.flags,
      dataShift: this.ctx.dataShift,
      metaShift: this.ctx.metaShift,
      cno: this.ctx.cno,
      part: this.ctx.part,
      metaCount: this.images.length,
      createdMs: Date.now(),
      baseInode: this.ctx.baseInode,
      inode: this.ctx.inode,
    }
  }
}

/** Blocks by reference read at once for their CRC when a PartedSegment object is built. */
const REF_CRC_RUN_BYTES = 4 * 1024 * 1024

/** Dirty blocks under `node` that no object in flight holds. */
export function unsentUnder(node: MapNode, tier: DirtyTier): number {
  if (node.dirtyCount === 0) return 0
  let n = 0
  for (let i = 0; i < node.count; i++) {
    const lo = node.lo[i] as number
    if (isDirtyRef(node.hi[i] as number, lo) && !tier.placed(lo - DIRTY_BASE)) n++
  }
  return n
}

/**
 * The leaf that sequential writes still append to: the map's rightmost leaf while it is
 * not full and holds dirty blocks. Objects sent before the flush (ahead, or partial
 * segments) leave it out until it is full: taken now, it would be split from the blocks
 * written next, which would go to a later object with the leaf stored again. Its blocks
 * wait in memory meanwhile, so it is held back only when a full leaf's data is under the
 * dirty limit, or when its dirty blocks are all written by reference (they hold no bytes:
 * a file written by reference, taken a step at a time, keeps full leaves whatever the
 * limit); the flush takes it as it is.
 */
export function growingLeaf(core: FileState): MapNode | undefined {
  const leaf = core.map.leafAt(MAX_BLOCK_KEY)
  if (leaf === undefined || leaf === core.map.root || leaf.dirtyCount === 0 || leaf.count >= leaf.capacity) {
    return undefined
  }
  if (leaf.capacity * core.blockSize < dirtyLimit(core.settings)) return leaf
  return holdsBytes(leaf, core.tier) ? undefined : leaf
}

/** Whether a dirty block under `leaf` is held by value (its bytes in the tier), not by reference. */
function holdsBytes(leaf: MapNode, tier: DirtyTier): boolean {
  for (let i = 0; i < leaf.count; i++) {
    const lo = leaf.lo[i] as number
    if (isDirtyRef(leaf.hi[i] as number, lo) && !tier.isRef(lo - DIRTY_BASE)) return true
  }
  return false
}

/** The largest block index. */
const MAX_BLOCK_KEY = 2 ** 32 - 1

/**
 * The bytes of blocks slots[first … first + count): views of the slabs for slots (a run of
 * consecutive slots as one view, pinned until `done`), bytes read from the source for
 * references (a run contiguous in one source as one read, given back to the source by
 * `done`). `onBlock(k, slot, crc)` is told the CRC-32 of each block's bytes as they will
 * be sent.
 */
export async function takeBlocks(
  tier: DirtyTier,
  slots: ArrayLike<number>,
  first: number,
  count: number,
  onBlock: (k: number, slot: number, crc: number) => void,
): Promise<{ chunks: Uint8Array[]; done: () => void }> {
  const bs = tier.blockSize
  const chunks: Uint8Array[] = []
  let crcs = new Uint32Array(0)
  /** Runs pinned: first slot, count, first slot, count, … */
  const pinned: number[] = []
  /** Bytes read from sources, and the sources. */
  const read: Array<{ source: BlockSource; bytes: Uint8Array }> = []
  const done = () => {
    for (let j = 0; j < pinned.length; j += 2) {
      const s = pinned[j] as number
      const end = s + (pinned[j + 1] as number)
      for (let slot = s; slot < end; slot++) tier.unpin(slot)
    }
    pinned.length = 0
    for (const { source, bytes } of read.splice(0)) source.release?.(bytes)
  }
  try {
    for (let k = first; k < first + count; ) {
      const s0 = slots[k] as number
      let n = 1
      if (tier.isRef(s0)) {
        const { source, position } = tier.refOf(s0)
        while (k + n < first + count) {
          const next = slots[k + n] as number
          if (!tier.isRef(next) || !tier.refFollows(slots[k + n - 1] as number, next)) break
          n++
        }
        const bytes = await readSource(source, position, n * bs)
        read.push({ source, bytes })
        // One pass over plain views (a Buffer's subarray per block costs more than its CRC).
        if (crcs.length < n) crcs = new Uint32Array(n)
        crc32Blocks(bytes, bs, crcs)
        for (let i = 0; i < n; i++) onBlock(k + i, slots[k + i] as number, crcs[i] as number)
        chunks.push(bytes)
      } else {
        while (k + n < first + count && tier.follows(s0 + n - 1, slots[k + n] as number)) n++
        pinned.push(s0, 0)
        for (let i = 0; i < n; i++) {
          tier.pin(s0 + i)
          pinned[pinned.length - 1] = i + 1
          onBlock(k + i, s0 + i, tier.crcOf(s0 + i))
        }
        const so = tier.offset(s0)
        chunks.push(tier.slab(s0).subarray(so, so + n * bs))
      }
      k += n
    }
  } catch (err) {
    done()
    throw err
  }
  return { chunks, done }
}
