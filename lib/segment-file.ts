/**
 * SegmentFile: one file in a container, opened for reading and writing.
 *
 * - Calls are serialised: each runs after the previous one has finished, so a write,
 *   a read and a flush never interleave on one handle.
 * - Writes go to the dirty tier. Under the dirty limit, what is unsent may go ahead
 *   (send-ahead.ts: the writer waits only for room among the requests in flight); over
 *   it, the open object closes and partial segments are written before the write
 *   returns (the writer waits: that is the backpressure). Nothing a write does is
 *   visible to other readers until a flush publishes it.
 * - A failure of the store during a write or flush leaves the handle usable: what was
 *   not stored is still dirty and the next flush writes it. A bug (ERR_INTERNAL) or an
 *   abort makes the handle unusable; every later call throws it again.
 */
import debug from 'debug'
import { StreamSegmentError } from './errors.js'
import { decodeInodeObject, emptyInode, FORMAT_PARTED, FORMAT_STREAM, type Inode } from './format/inode.js'
import { INODE_KEY } from './format/names.js'
import { Reader } from './read/reader.js'
import { dirtyLimitBytes, resolveSettings, type Settings } from './settings.js'
import { DIRTY_BASE, isDirtyRef } from './state/block-map.js'
import { type BlockSource, readSource } from './state/dirty-tier.js'
import { FileCore } from './state/file-state.js'
import type { ObjectStore } from './store/types.js'
import {
  type CheckpointCounters,
  type FlushTiming,
  flush,
  newCounters,
  rollForward,
  writePartials,
} from './write/flush.js'
import { SendAhead } from './write/send-ahead.js'

const log = debug('stream-segment:file')

export interface OpenOptions extends Partial<Settings> {
  /** Open this checkpoint instead of the latest; writing to it publishes a new checkpoint with its content. */
  cno?: number
  readOnly?: boolean
}

export class SegmentFile {
  private queue: Promise<unknown> = Promise.resolve()
  private sticky: unknown
  private closed = false
  private counters: CheckpointCounters = newCounters()
  private readonly reader: Reader
  private readonly dirtyLimit: number
  private readonly sendAhead: SendAhead
  /** Highest dirty-tier use seen (bytes), for tests and benchmarks. */
  peakDirtyBytes = 0
  /** Partial segments written under memory pressure. */
  partials = 0

  private constructor(
    readonly core: FileCore,
    readonly readOnly: boolean,
  ) {
    this.reader = new Reader(core)
    this.dirtyLimit = dirtyLimitBytes(core.settings)
    this.sendAhead = new SendAhead(core, () => this.counters)
  }

  /** Starts a new container in `store`; ERR_CONFLICT if it already has a checkpoint. */
  static async create(store: ObjectStore, settings: Partial<Settings> = {}): Promise<SegmentFile> {
    const s = resolveSettings(settings)
    if ((await store.head(INODE_KEY)) !== undefined) {
      throw StreamSegmentError.conflict(`${store.url}: a container exists here already (open it instead)`)
    }
    const none = emptyInode()
    const base = emptyInode({
      format: s.format === 'parted' ? FORMAT_PARTED : FORMAT_STREAM,
      dataShift: Math.log2(s.dataBlockSize),
      metaShift: Math.log2(s.metaBlockSize),
      ctimeMs: Date.now(),
    })
    return new SegmentFile(new FileCore(store, s, base, none, undefined), false)
  }

  /**
   * Opens the latest checkpoint (or `cno`); ERR_NOT_FOUND when the container has none.
   * A writer reads the commit point (HEAD for its ETag, then GET), and first publishes
   * the next checkpoint if its part 0 is complete but was never published, built on that
   * very inode (checkpoint.ts, `rollForward`: one more HEAD when there is none). A reader (`readOnly`)
   * GETs `inode` alone, or, given a `cno`, reads only that checkpoint's part 0 (its format
   * detected), so it can open a complete checkpoint whose publication was interrupted;
   * a checkpoint without a part 0 was abandoned and is ERR_NOT_FOUND.
   */
  static async open(store: ObjectStore, options: OpenOptions = {}): Promise<SegmentFile> {
    const { cno, readOnly = false } = options
    if (cno !== undefined && (!Number.isSafeInteger(cno) || cno < 1)) {
      throw StreamSegmentError.invalidArgument(`cno must be a positive integer, got ${cno}`)
    }
    const noContainer = () => StreamSegmentError.notFound(`${store.url}: no container here (no ${INODE_KEY} object)`)
    let published: Inode
    let etag: string | undefined
    let base: Inode
    if (readOnly && cno !== undefined) {
      base = published = await FileCore.readCheckpointInode(store, cno)
    } else if (readOnly) {
      const bytes = await store.get(INODE_KEY).catch((err) => {
        throw StreamSegmentError.is(err, 'ERR_NOT_FOUND') ? noContainer() : err
      })
      base = published = decodeInodeObject(bytes)
    } else {
      const info = await store.head(INODE_KEY)
      if (info === undefined) throw noContainer()
      etag = info.etag
      base = published = decodeInodeObject(await store.get(INODE_KEY))
    }
    // The format and block sizes are the container's, fixed for its life: checked before
    // a writer changes anything.
    const s = resolveSettings({
      ...options,
      format: base.format === FORMAT_PARTED ? 'parted' : 'stream',
      dataBlockSize: 2 ** base.dataShift,
      metaBlockSize: 2 ** base.metaShift,
    })
    for (const name of ['format', 'dataBlockSize', 'metaBlockSize'] as const) {
      if (options[name] !== undefined && options[name] !== s[name]) {
        throw StreamSegmentError.invalidArgument(
          `${name} ${options[name]}: the container at ${store.url} has ${s[name]}`,
        )
      }
    }
    if (!readOnly) {
      const rolled = await rollForward(store, published, etag as string)
      if (rolled !== undefined) {
        base = published = rolled.inode
        etag = rolled.etag
      }
      if (cno !== undefined && cno !== published.cno) {
        if (cno > published.cno) {
          throw StreamSegmentError.notFound(
            `${store.url}: checkpoint ${cno} is not published (the latest is ${published.cno}); a reader can open it read-only`,
          )
        }
        base = await FileCore.readCheckpointInode(store, cno, undefined, published.format)
      }
    }
    log('open %s at checkpoint %d (%d bytes)', store.url, base.cno, base.size)
    return new SegmentFile(new FileCore(store, s, base, published, etag), readOnly)
  }

  get settings(): Settings {
    return this.core.settings
  }

  /** The file's size, unflushed writes included. */
  get size(): number {
    return this.core.size
  }

  /** The checkpoint this handle last opened or published. */
  get cno(): number {
    return this.core.base.cno
  }

  /**
   * For progress displays: body bytes of every upload request that completed (objects
   * sent ahead, partial segments, flush parts; an upload that failed and was sent again
   * counts twice) and requests carrying bodies in flight now.
   */
  get progress(): { uploadedBytes: number; requestsInFlight: number } {
    return { uploadedBytes: this.core.uploader.uploadedBytes, requestsInFlight: this.core.uploader.slots.inUse }
  }

  /** Bytes held in the dirty tier now. */
  get dirtyBytes(): number {
    return this.core.tier.usedBytes
  }

  write(offset: number, bytes: Uint8Array): Promise<void> {
    return this.run('write', true, async () => {
      checkRange(offset, bytes.byteLength, this.core.blockSize)
      await this.writeBlocks(offset, bytes.byteLength, bytes)
      await this.afterWrite()
    })
  }

  /**
   * Writes [offset, offset + length) by reference: the bytes are `source`'s from
   * `sourceOffset` on, read only when the object holding them is sent (or the flush, or a
   * read, needs them), never held in the dirty tier; the dirty limits do not apply to
   * them. Blocks only partly covered are read at once and written by value. Contract: the
   * source gives the same bytes until the flush that publishes them returns.
   */
  writeRef(offset: number, length: number, source: BlockSource, sourceOffset = 0): Promise<void> {
    return this.run('writeRef', true, async () => {
      checkRange(offset, length, this.core.blockSize)
      if (!Number.isSafeInteger(sourceOffset) || sourceOffset < 0) {
        throw StreamSegmentError.invalidArgument(`sourceOffset ${sourceOffset} must be a non-negative integer`)
      }
      const core = this.core
      const { tier, map } = core
      const bs = core.blockSize
      const end = offset + length
      const firstWhole = Math.ceil(offset / bs)
      const endWhole = Math.max(firstWhole, Math.floor(end / bs))
      const byValue = async (from: number, to: number) => {
        if (to > from)
          await this.writeBlocks(from, to - from, await readSource(source, sourceOffset + from - offset, to - from))
      }
      if (firstWhole * bs >= end || endWhole === firstWhole) {
        await byValue(offset, end)
      } else {
        await byValue(offset, firstWhole * bs)
        this.sendAhead.noteWrite(firstWhole)
        const ptr: [number, number] = [0, 0]
        for (let b = firstWhole; b < endWhole; b++) {
          if (!map.lookup(b, ptr)) {
            await map.load(b)
            map.lookup(b, ptr)
          }
          const id = tier.allocRef(source, sourceOffset + b * bs - offset)
          if (!map.update(b, 0, DIRTY_BASE + id)) throw StreamSegmentError.internal(`block ${b}: path unloaded`)
          if (isDirtyRef(ptr[0], ptr[1])) tier.release(ptr[1] - DIRTY_BASE)
        }
        if (endWhole * bs > core.size) core.size = endWhole * bs
        await byValue(endWhole * bs, end)
      }
      if (end > core.size) core.size = end
      await this.afterWrite()
    })
  }

  writeZeroes(offset: number, length: number): Promise<void> {
    return this.run('writeZeroes', true, async () => {
      checkRange(offset, length, this.core.blockSize)
      const core = this.core
      const bs = core.blockSize
      const end = offset + length
      const firstWhole = Math.ceil(offset / bs)
      const endWhole = Math.floor(end / bs)
      const zeroPart = async (from: number, to: number) => {
        if (to > from) await this.writeBlocks(from, to - from, undefined)
      }
      if (firstWhole >= endWhole) {
        await zeroPart(offset, end)
      } else {
        await zeroPart(offset, firstWhole * bs)
        await core.map.zeroRange(firstWhole, endWhole, (id) => core.tier.release(id))
        await zeroPart(endWhole * bs, end)
      }
      if (end > core.size) core.size = end
      await this.afterWrite()
    })
  }

  truncate(size: number): Promise<void> {
    return this.run('truncate', true, async () => {
      checkRange(size, 0, this.core.blockSize)
      const core = this.core
      const bs = core.blockSize
      if (size < core.size) {
        const keep = Math.ceil(size / bs)
        await core.map.truncate(keep, (id) => core.tier.release(id))
        // Bytes past the end in the last block must read as zeros if the file grows again.
        if (size % bs !== 0) {
          const [hi, lo] = await core.map.get(keep - 1)
          if (hi !== 0 || lo !== 0) {
            await this.writeBlocks(size, keep * bs - size, undefined)
          }
        }
      }
      core.size = size
    })
  }

  read(offset: number, length: number): Promise<Uint8Array> {
    return this.run('read', false, async () => {
      checkRange(offset, length, this.core.blockSize)
      const end = Math.min(offset + length, this.core.size)
      return end <= offset ? new Uint8Array(0) : this.reader.read(offset, end - offset)
    })
  }

  /** Publishes a checkpoint with everything written so far (a no-op when nothing changed). */
  flush(): Promise<FlushTiming> {
    return this.run('flush', true, async () => {
      await this.sendAhead.drain()
      return flush(this.core, this.counters)
    })
  }

  /** Waits until every object sent ahead so far has completed (or failed: its blocks then go again). */
  settle(): Promise<void> {
    return this.run('settle', false, async () => {
      await this.sendAhead.settle()
      this.sendAhead.check()
    })
  }

  /** Discards every change since the last checkpoint this handle opened or published. */
  rollback(): Promise<void> {
    return this.run('rollback', true, async () => {
      await this.sendAhead.abandon()
      this.sendAhead.check()
      this.core.tier.clear()
      this.core.resetTree()
      this.reader.clear()
      this.counters = newCounters()
    })
  }

  /**
   * Closes the handle, discarding what was not flushed: uploads in flight are waited for,
   * the open multipart upload is aborted. Runs after an abort or a failure too.
   */
  close(): Promise<void> {
    const p = this.queue.then(async () => {
      if (this.closed) return
      this.closed = true
      await this.sendAhead.abandon()
      this.core.tier.clear()
    })
    this.queue = p.catch(() => undefined)
    return p
  }

  /** Aborts every request in flight and makes the handle unusable; nothing more is published. */
  abort(reason?: unknown): void {
    const err = StreamSegmentError.is(reason)
      ? reason
      : StreamSegmentError.aborted(`${this.core.store.url}: aborted`, reason)
    this.sticky ??= err
    this.core.abort.abort(err)
  }

  // --- internals ---

  private run<T>(what: string, writes: boolean, fn: () => Promise<T>): Promise<T> {
    const p = this.queue.then(async () => {
      if (this.sticky !== undefined) throw this.sticky
      if (this.closed) throw StreamSegmentError.state(`${what}: the file is closed`)
      if (writes && this.readOnly) throw StreamSegmentError.state(`${what}: the file is open read-only`)
      try {
        return await fn()
      } catch (err) {
        if (StreamSegmentError.is(err, 'ERR_INTERNAL') || !(err instanceof StreamSegmentError)) this.sticky ??= err
        if (this.core.signal.aborted) throw this.sticky ?? err
        throw err
      }
    })
    this.queue = p.catch(() => undefined)
    return p
  }

  /**
   * Writes `src` (zeros when undefined) at [offset, offset + length): for each block,
   * finds or makes its dirty slot (filling it from storage, or with zeros, when only part
   * of it is written) and copies the bytes in. Whole blocks landing in consecutive slots
   * are copied as one run; a run is copied before anything is awaited, so no block is
   * ever mapped to a slot that does not hold its bytes yet when control leaves.
   */
  private async writeBlocks(offset: number, length: number, src: Uint8Array | undefined): Promise<void> {
    const core = this.core
    const { tier, map } = core
    const bs = core.blockSize
    const end = offset + length
    const ptr: [number, number] = [0, 0]
    let runSlot = -1
    let runCount = 0
    let runFrom = 0
    this.sendAhead.noteWrite(Math.floor(offset / bs))
    const flushRun = () => {
      if (runCount > 0) tier.writeRun(runSlot, runCount, src as Uint8Array, runFrom - offset)
      runCount = 0
    }
    for (let b = Math.floor(offset / bs); b * bs < end; b++) {
      const from = Math.max(offset, b * bs)
      const to = Math.min(end, (b + 1) * bs)
      if (!map.lookup(b, ptr)) {
        flushRun()
        await map.load(b)
        map.lookup(b, ptr)
      }
      const [hi, lo] = ptr
      const whole = to - from === bs
      let slot: number
      if (isDirtyRef(hi, lo) && !tier.pinned(lo - DIRTY_BASE) && !tier.isRef(lo - DIRTY_BASE)) {
        slot = lo - DIRTY_BASE
      } else if (isDirtyRef(hi, lo)) {
        // Its slot is being sent (copy-on-write into a fresh one), or it is written by
        // reference (its bytes come from the source into a slot of their own).
        const old = lo - DIRTY_BASE
        flushRun()
        slot = tier.alloc()
        if (!whole) {
          if (tier.isRef(old)) {
            try {
              tier.write(slot, 0, await tier.readRef(old, 0, bs))
            } catch (err) {
              tier.release(slot)
              throw err
            }
            // The source read yielded: an object that completed meanwhile may have stored
            // the block and released its reference (and its leaf may have left the cache).
            // The bytes read are the block's either way.
            while (!map.lookup(b, ptr)) await map.load(b)
          } else tier.copySlot(old, slot)
        }
        if (!map.update(b, 0, DIRTY_BASE + slot)) throw StreamSegmentError.internal(`block ${b}: path unloaded`)
        if (ptr[0] === 0 && ptr[1] === DIRTY_BASE + old) tier.release(old)
      } else {
        slot = tier.alloc()
        if (!whole) {
          flushRun()
          try {
            if (hi === 0 && lo === 0) tier.fill(slot, 0, bs, 0)
            else tier.write(slot, 0, await this.reader.read(b * bs, bs))
          } catch (err) {
            tier.release(slot)
            throw err
          }
        }
        if (!map.update(b, 0, DIRTY_BASE + slot)) throw StreamSegmentError.internal(`block ${b}: path unloaded`)
      }
      if (src === undefined) tier.fill(slot, from - b * bs, to - from, 0)
      else if (!whole) tier.write(slot, from - b * bs, src.subarray(from - offset, to - offset))
      else if (runCount > 0 && tier.follows(runSlot + runCount - 1, slot)) runCount++
      else {
        flushRun()
        runSlot = slot
        runCount = 1
        runFrom = from
      }
    }
    flushRun()
    if (end > core.size) core.size = end
  }

  /**
   * The dirty limits come first: over the limit, the open object closes early and the
   * writer waits for every object in flight, then writes partial segments if that is not
   * enough. Under it, what there is to send ahead is sent.
   */
  private async afterWrite(): Promise<void> {
    const tier = this.core.tier
    if (tier.usedBytes > this.peakDirtyBytes) this.peakDirtyBytes = tier.usedBytes
    if (tier.usedBytes > this.dirtyLimit) {
      await this.sendAhead.relieve()
      if (tier.usedBytes > this.dirtyLimit) {
        await writePartials(this.core, this.counters)
        this.partials++
      }
    } else {
      await this.sendAhead.afterWrite()
    }
  }
}

function checkRange(offset: number, length: number, blockSize: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0) {
    throw StreamSegmentError.invalidArgument(`offset ${offset} and length ${length} must be non-negative integers`)
  }
  // Block indexes are 32 bits on storage.
  if (offset + length > 2 ** 32 * blockSize) {
    throw StreamSegmentError.invalidArgument(
      `offset ${offset} + length ${length} is past the largest file, ${2 ** 32 * blockSize} bytes at ${blockSize}-byte blocks`,
    )
  }
}
