/**
 * The state of one open file: its block map, dirty tier, uploader, and the inode it is
 * built on. SegmentFile drives it; checkpoint.ts and reader.ts work on it.
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
import { readObjectHeader } from '../container/object-header.js'
import { Uploader } from '../container/uploader.js'
import { StreamSegmentError } from '../errors.js'
import { emptyInode, FORMAT_PARTED, FORMAT_STREAM, type Inode } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import { decodeNode } from '../format/node.js'
import { MAX_PART, pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
import type { Settings } from '../settings.js'
import type { ObjectStore } from '../store/types.js'
import type { ObjectContext, ObjectPlan } from '../write/object-plan.js'
import { BlockMap, DIRTY_BASE, type MapNode } from './block-map.js'
import { DirtyTier } from './dirty-tier.js'

export class FileCore {
  readonly map: BlockMap
  readonly tier: DirtyTier
  readonly uploader: Uploader
  readonly dataShift: number
  readonly metaShift: number
  /** FORMAT_STREAM or FORMAT_PARTED: the container's, fixed for its life. */
  readonly format: number
  /** The file's size, including unflushed writes. */
  size: number
  /** The inode this file's state is built on (its block map's root, until changed). */
  base: Inode
  /** The inode at the commit point, and its ETag (undefined: no checkpoint yet). */
  published: Inode
  publishedEtag: string | undefined
  /** The checkpoint being built: its number and the next free part. */
  pending: { cno: number; nextPart: number } | undefined
  /** Aborts every request of this file (destroy, abort signal). */
  readonly abort = new AbortController()

  constructor(
    readonly store: ObjectStore,
    readonly settings: Settings,
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
    this.map = new BlockMap(
      settings.maxNodeEntries,
      (hi, lo, expect) => this.loadNode(hi, lo, expect),
      settings.nodeCacheNodes,
    )
    this.base = base
    this.published = published
    this.publishedEtag = publishedEtag
    this.size = base.size
    this.resetTree()
  }

  get blockSize(): number {
    return this.settings.dataBlockSize
  }

  get signal(): AbortSignal {
    return this.abort.signal
  }

  /** Rebuilds the in-memory tree from `base` (nodes load on demand). */
  resetTree(): void {
    const b = this.base
    this.map.setRoot(b.rootLevel, b.rootCount, b.rootKeys, b.rootPtrHi, b.rootPtrLo)
    this.size = b.size
  }

  /** Whether a flush has anything to write. */
  get changed(): boolean {
    return this.map.root.dirty || this.size !== this.base.size || this.base !== this.published
  }

  /** The checkpoint number of the checkpoint being built, and a fresh part number in it. */
  reserve(part0 = false): { cno: number; part: number } {
    this.pending ??= { cno: this.published.cno + 1, nextPart: 1 }
    if (part0) return { cno: this.pending.cno, part: 0 }
    const part = this.pending.nextPart++
    if (part > MAX_PART) {
      throw StreamSegmentError.state(
        `checkpoint ${this.pending.cno} has used all ${MAX_PART} part numbers: flush to start a new one`,
      )
    }
    return { cno: this.pending.cno, part }
  }

  /** Moves to a new checkpoint number above both the published one and the one given up. */
  abandonCheckpoint(): void {
    const cno = Math.max(this.published.cno, this.pending?.cno ?? 0) + 1
    this.pending = { cno, nextPart: 1 }
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
    x.mtimeMs = Date.now()
    return x
  }

  get ctimeMs(): number {
    return this.published.ctimeMs || this.base.ctimeMs || this.createdMs
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
  applyStored(plan: ObjectPlan): number {
    const { cno } = plan.ctx
    let dead = 0
    for (let k = 0; k < plan.dataBlocks; k++) {
      const slot = plan.slot[k] as number
      if (plan.unchanged(k)) {
        const leaf = this.map.replaceIf(plan.blockIndex[k] as number, 0, DIRTY_BASE + slot, cno, plan.dataLo(k))
        if (leaf !== undefined) {
          this.tier.release(slot)
          continue
        }
      }
      dead += this.blockSize
    }
    plan.images.forEach((im, j) => {
      const n = im.node
      if (!sameEntries(n, im)) return
      if (n === this.map.root) return
      this.map.setStored(n, cno, plan.metaLo(j))
    })
    this.map.trimCache()
    return dead
  }

  /** Reads one block-map node from storage, checked against what its parent says. */
  private async loadNode(
    hi: number,
    lo: number,
    expect: { level: number; minKey: number; maxKeyExclusive: number },
  ): Promise<import('../format/node.js').BlockMapNode> {
    const key = segmentKey(hi, pointerPart(lo))
    const start = pointerUnit(lo) * UNIT_BYTES
    const bytes = await this.store.get(key, {
      range: { start, end: start + this.settings.metaBlockSize },
      signal: this.signal,
    })
    return decodeNode(bytes, {
      ...expect,
      cno: hi,
      maxCno: Math.max(this.published.cno, this.base.cno, this.pending?.cno ?? 0),
      where: `${this.store.url}/${key} meta block at ${start}`,
    })
  }

  /**
   * The inode stored in a checkpoint's part 0 (for opening an older checkpoint), its
   * format detected (object-header.ts); `format`, the container's, when known.
   */
  static async readCheckpointInode(
    store: ObjectStore,
    cno: number,
    signal?: AbortSignal,
    format?: number,
  ): Promise<Inode> {
    const key = segmentKey(cno, 0)
    const info = await store.head(key, { signal })
    if (info === undefined) throw StreamSegmentError.notFound(`${store.url}: checkpoint ${cno} has no part 0 (${key})`)
    return (await readObjectHeader(store, cno, 0, { format, size: info.size, signal })).header.inode
  }
}

function sameEntries(n: MapNode, im: { level: number; keys: Uint32Array; hi: Uint32Array; lo: Uint32Array }): boolean {
  if (n.level !== im.level || n.count !== im.keys.length) return false
  for (let i = 0; i < n.count; i++) {
    if (n.keys[i] !== im.keys[i] || n.hi[i] !== im.hi[i] || n.lo[i] !== im.lo[i]) return false
  }
  return true
}
