/**
 * The write paths of an open file: bytes by value, by reference, zeros, and truncation,
 * all cut at block boundaries by one splitter (`blockSpan`), then the dirty limits.
 *
 * - By value, each byte is copied once, into the dirty tier; whole blocks landing in
 *   consecutive slots are copied as one run, before anything is awaited, so no block is
 *   ever mapped to a slot that does not hold its bytes yet when control leaves.
 * - A block being sent is never changed in place: a rewrite takes a fresh slot (copy on
 *   write). A block only partly written is first filled from storage, from its source
 *   (by reference) or with zeros.
 * - Whole blocks that held nothing dirty go as runs: slots taken a run at a time, copied
 *   and hashed in one pass, mapped in one step (BlockMap.setRun). With `adopt`, runs long
 *   enough are kept as the caller's bytes instead of copied (DirtyTier.adoptRun).
 * - The dirty limits come first: over the limit the open object closes early and the
 *   writer waits for every object in flight, then writes partial segments if that is not
 *   enough. Under it, what there is to send ahead is sent. A write larger than a quarter
 *   of the limit is taken in steps of that size, the limits applied after each; so is a
 *   write by reference (its blocks hold per-block state until stored, not bytes).
 * - After TURN_BYTES by value without the event loop turning, a write lets it turn once
 *   (letLoopTurn), so the store's answers come while a producer that never waits writes.
 */

import { setImmediate as nextTurn } from 'node:timers/promises'
import { StreamSegmentError } from '../errors.js'
import type { Reader } from '../read/reader.js'
import { DIRTY_BASE, isDirtyRef } from '../state/block-map.js'
import { type BlockSource, readSource } from '../state/dirty-tier.js'
import type { FileState } from '../state/file-state.js'
import { describeValue } from '../util/typed-arrays.js'
import { writePartials } from './flush.js'
import type { SendAhead } from './send-ahead.js'

/** Bytes a writer takes without the event loop turning before it lets it turn (BlockWriter#letLoopTurn). */
const TURN_BYTES = 8 * 1024 * 1024

/**
 * [offset, end) at `bs`-byte blocks: the whole blocks [firstWhole, endWhole), and the
 * partial ends [offset, headEnd) and [tailStart, end), either of which may be empty.
 * A range inside one block is all head.
 */
export function blockSpan(
  offset: number,
  end: number,
  bs: number,
): { firstWhole: number; endWhole: number; headEnd: number; tailStart: number } {
  const firstWhole = Math.ceil(offset / bs)
  const endWhole = Math.floor(end / bs)
  if (endWhole <= firstWhole) return { firstWhole, endWhole: firstWhole, headEnd: end, tailStart: end }
  return { firstWhole, endWhole, headEnd: firstWhole * bs, tailStart: endWhole * bs }
}

/** The caller's write that `BlockWriter.write` takes a piece of (a WAL logs one in pieces), for its messages. */
export interface WriteCall {
  offset: number
  length: number
  /** Bytes of it before the piece. */
  before: number
}

export class BlockWriter {
  /** Highest dirty-tier use seen (bytes), for tests and benchmarks. */
  peakDirtyBytes = 0
  /** Partial segments written under memory pressure. */
  partials = 0
  /** Bytes written since the event loop last turned (letLoopTurn). */
  private sinceTurn = 0

  constructor(
    private readonly core: FileState,
    private readonly sendAhead: SendAhead,
    private readonly reader: Reader,
    private readonly dirtyLimit: number,
  ) {}

  /**
   * Bytes taken per step of one write: a quarter of the dirty limit, whole blocks. A
   * write larger than that is taken a step at a time, each followed by the dirty limits,
   * so one write larger than the limit never holds more than the limit and a step.
   */
  get writeStep(): number {
    const bs = this.core.blockSize
    return Math.max(bs, Math.floor(this.dirtyLimit / 4 / bs) * bs)
  }

  /**
   * `adopt`: runs of whole blocks of `bytes` are kept as they are, not copied (dirty-tier.ts,
   * adoptRun). What may fail comes first and changes nothing (`readEnds`); then `logged` (a
   * WAL appends the write there), and only then the file changes: a write whose reads fail
   * leaves the file as it was and is not logged, so no replay applies it.
   */
  async write(
    offset: number,
    bytes: Uint8Array,
    adopt = false,
    logged?: () => Promise<void>,
    call: WriteCall = { offset, length: bytes.byteLength, before: 0 },
  ): Promise<void> {
    checkRange('write', offset, bytes.byteLength, this.core.blockSize)
    const length = bytes.byteLength
    if (length === 0) return // as pwrite(2) of no bytes: the file does not grow to `offset`
    const step = this.writeStep
    const pending = this.readEnds(offset, length, Math.floor((offset + step) / step) * step, logged !== undefined)
    const ends = pending === undefined ? undefined : await pending
    if (logged !== undefined) await logged()
    // A store failure in the limits after one step fails the write, but all its bytes go
    // in first (as in a write taken in one step): the later steps skip the limits.
    let failed: { err: unknown } | undefined
    let at = 0
    do {
      // The caller's buffer may be detached (transferred to a worker) or shrunk while a step
      // waits for the limits: V8's TypeError, taken for a bug, would end the handle.
      if (bytes.byteLength !== length) {
        throw StreamSegmentError.invalidArgument(
          `write: the bytes' ArrayBuffer was detached or shrunk once ${call.before + at} of the ${call.length} bytes at ${call.offset} were written`,
        )
      }
      // Steps end on block boundaries of the file.
      const end = Math.min(length, Math.floor((offset + at + step) / step) * step - offset)
      const src = at === 0 && end === length ? bytes : bytes.subarray(at, end)
      await this.writeBlocks(offset + at, end - at, src, adopt, ends)
      if (failed === undefined) failed = await this.limitsAfterStep()
      await this.letLoopTurn(end - at)
      at = end
    } while (at < length)
    if (failed !== undefined) throw failed.err
  }

  /**
   * Counts `n` bytes taken, and lets the event loop turn once when TURN_BYTES were taken
   * since it last turned. A producer whose writes resolve at once (a loop of awaited writes,
   * a source piped in that never waits) never lets it turn by itself: the store's answers
   * and the sockets' writes would wait until the dirty limit stopped it, so nothing would
   * be sent while it produces and the writer would fill its whole limit. A producer that
   * waits for anything (a file, a socket) lets the loop turn before TURN_BYTES and never
   * waits here.
   */
  private letLoopTurn(n: number): Promise<void> | undefined {
    if (this.sinceTurn === 0) {
      setImmediate(() => {
        this.sinceTurn = 0
      })
    }
    this.sinceTurn += n
    return this.sinceTurn >= TURN_BYTES ? nextTurn() : undefined
  }

  async writeRef(offset: number, length: number, source: BlockSource, sourceOffset: number): Promise<void> {
    checkRange('writeRef', offset, length, this.core.blockSize)
    if (!Number.isSafeInteger(sourceOffset) || sourceOffset < 0) {
      throw StreamSegmentError.invalidArgument(
        `writeRef: sourceOffset must be an integer ≥ 0, got ${describeValue(sourceOffset)}`,
      )
    }
    if (typeof (source as Partial<BlockSource> | null)?.read !== 'function') {
      throw StreamSegmentError.invalidArgument(
        `writeRef: source must be a BlockSource (an object with read(position, length), e.g. fileSource), got ${describeValue(source)}`,
      )
    }
    if (length === 0) return // no bytes: nothing changes (see write)
    const core = this.core
    const bs = core.blockSize
    const end = offset + length
    const span = blockSpan(offset, end, bs)
    core.sources.add(source)
    const byValue = async (from: number, to: number) => {
      if (to > from) {
        await this.writeBlocks(from, to - from, await readSource(source, sourceOffset + from - offset, to - from))
      }
    }
    await byValue(offset, span.headEnd)
    // The whole blocks go a step at a time, each followed by the limits and sending ahead:
    // a reference holds no bytes, but its per-block state (~50 bytes, and its leaf entry)
    // stays until its object is stored, so a range taken whole would hold it for the whole
    // file (16 GiB for 1 TiB) before the first object went. As in `write`, a store failure
    // after one step fails the call once every step is in.
    const step = this.writeStep / bs
    let failed: { err: unknown } | undefined
    for (let from = span.firstWhole; from < span.endWhole; from += step) {
      const to = Math.min(span.endWhole, from + step)
      await this.refBlocks(from, to, source, sourceOffset - offset)
      core.grow(to * bs)
      if (failed === undefined && to < span.endWhole) failed = await this.limitsAfterStep()
    }
    await byValue(span.tailStart, end)
    core.grow(end)
    if (failed !== undefined) throw failed.err
    await this.afterWrite()
  }

  /** Blocks [from, to) written by reference: block b's bytes are `source`'s at b × blockSize + `shift`. */
  private async refBlocks(from: number, to: number, source: BlockSource, shift: number): Promise<void> {
    const { tier, map } = this.core
    const bs = this.core.blockSize
    this.sendAhead.noteWrite(from)
    const ptr: [number, number] = [0, 0]
    for (let b = from; b < to; b++) {
      // Blocks that held nothing dirty take ids as runs, mapped as one.
      const n = map.freshRun(b, to - b)
      if (n > 0) {
        for (let k = 0; k < n; ) {
          const id = tier.allocRefRun(source, (b + k) * bs + shift, n - k)
          map.setRun(b + k, tier.lastRun, 0, DIRTY_BASE + id)
          k += tier.lastRun
        }
        b += n - 1
        continue
      }
      if (!map.lookup(b, ptr)) await map.loadLookup(b, ptr)
      const id = tier.allocRef(source, b * bs + shift)
      if (!map.update(b, 0, DIRTY_BASE + id)) throw StreamSegmentError.internal(`block ${b}: path unloaded`)
      if (isDirtyRef(ptr[0], ptr[1])) tier.release(ptr[1] - DIRTY_BASE)
    }
  }

  /**
   * The limits after one step of a write taken in steps: undefined, or the store failure
   * they met, kept for the end of the write (the later steps skip them). Anything else is
   * thrown at once.
   */
  private async limitsAfterStep(): Promise<{ err: unknown } | undefined> {
    try {
      await this.afterWrite()
      return undefined
    } catch (err) {
      if (!StreamSegmentError.is(err) || err.code === 'ERR_INTERNAL' || err.code === 'ERR_ABORTED') throw err
      return { err }
    }
  }

  /** As `write`: what may fail first, then `logged`, then the file changes. */
  async writeZeroes(offset: number, length: number, logged?: () => Promise<void>): Promise<void> {
    checkRange('writeZeroes', offset, length, this.core.blockSize)
    if (length === 0) return // no bytes: nothing changes (see write)
    const core = this.core
    const end = offset + length
    const span = blockSpan(offset, end, core.blockSize)
    // No step: nothing stores a dirty block before this reaches it.
    const pending = this.readEnds(offset, length, Number.POSITIVE_INFINITY, logged !== undefined)
    const ends = pending === undefined ? undefined : await pending
    if (logged !== undefined) await logged()
    const zeroPart = async (from: number, to: number) => {
      if (to > from) await this.writeBlocks(from, to - from, undefined, false, ends)
    }
    await zeroPart(offset, span.headEnd)
    if (span.endWhole > span.firstWhole) {
      await core.map.zeroRange(span.firstWhole, span.endWhole, (id) => core.tier.release(id))
    }
    await zeroPart(span.tailStart, end)
    core.grow(end)
    await this.afterWrite()
  }

  /**
   * Cuts the file to `size` (or extends it with a hole). Everything that may fail comes
   * first and changes nothing: the path the cut descends is loaded and, when the new end
   * falls inside a block that holds data, that block is read. Then `logged` (a WAL appends
   * the truncate there), and only then the file changes, reading nothing more: a truncate
   * that fails leaves the file as it was and is not logged, so no replay applies it.
   */
  async truncate(size: number, logged?: () => Promise<void>): Promise<void> {
    checkSize('truncate', size, this.core.blockSize)
    const core = this.core
    const bs = core.blockSize
    const keep = Math.ceil(size / bs)
    const cut = size < core.size
    // The last block kept, its bytes past the new end zeroed (they must read as zeros if
    // the file grows again), when it holds data: written whole, it needs no read.
    let last: Uint8Array | undefined
    if (cut && keep > 0) {
      // Loads the path to block keep − 1: the one the cut descends (it then loads nothing).
      const [hi, lo] = await core.map.get(keep - 1)
      if (size % bs !== 0 && (hi !== 0 || lo !== 0)) {
        last = await this.reader.read((keep - 1) * bs, bs)
        last.fill(0, size % bs)
      }
    }
    await logged?.()
    if (cut) {
      if (last !== undefined) await this.writeBlocks((keep - 1) * bs, bs, last)
      await core.map.truncate(keep, (id) => core.tier.release(id))
    }
    core.resize(size)
  }

  /**
   * The blocks [offset, offset + length) covers only in part and that hold data (at most
   * two: where it starts and where it ends), with their bytes now: what writing there would
   * read (from storage, or from the source of a block written by reference), read before
   * the write changes anything, so that a read that fails leaves the file as it was. A
   * dirty block's bytes are copied too when the write reaches it only after `settledUpTo`
   * (the end of its first step): a partial segment written between its steps may store it
   * first. With `wholeRange` (a write logged first, in pieces of at most 64 MiB) every map
   * leaf over the range is loaded too (BlockMap.loadRange): applying it then loads
   * nothing, so it cannot fail half applied, and logged, on a leaf it could not read. Not
   * without a log: a write of any size would load leaves its cache may not hold.
   * Undefined, without waiting, when there is nothing to do (the common small write into
   * dirty blocks, whose cost this keeps).
   */
  private readEnds(
    offset: number,
    length: number,
    settledUpTo: number,
    wholeRange: boolean,
  ): Promise<Map<number, Uint8Array>> | undefined {
    const { map, tier } = this.core
    const bs = this.core.blockSize
    const end = offset + length
    const first = Math.floor(offset / bs)
    const last = Math.floor((end - 1) / bs)
    const ptr: [number, number] = [0, 0]
    let partial: number[] | undefined
    for (const b of first === last ? [first] : [first, last]) {
      if (Math.max(offset, b * bs) === b * bs && Math.min(end, (b + 1) * bs) === (b + 1) * bs) continue // whole
      if (map.lookup(b, ptr)) {
        const [hi, lo] = ptr
        if (hi === 0 && lo === 0) continue // a hole: zeros
        if (isDirtyRef(hi, lo) && !tier.isRef(lo - DIRTY_BASE) && b * bs < settledUpTo) continue // changes in place
      }
      ;(partial ??= []).push(b)
    }
    if (partial === undefined && !wholeRange) return undefined
    return this.readBlocks(partial ?? [], wholeRange ? [first, last + 1] : undefined)
  }

  /** The bytes now of the blocks `partial` that hold data (readEnds), and the map leaves over `range`. */
  private async readBlocks(partial: number[], range: [number, number] | undefined): Promise<Map<number, Uint8Array>> {
    const { map, tier } = this.core
    const bs = this.core.blockSize
    const ends = new Map<number, Uint8Array>()
    for (const b of partial) {
      const [hi, lo] = await map.get(b)
      if (hi === 0 && lo === 0) continue // a hole: zeros
      const id = lo - DIRTY_BASE
      if (isDirtyRef(hi, lo) && !tier.isRef(id)) {
        const at = tier.offset(id)
        ends.set(b, Buffer.from(tier.slab(id).subarray(at, at + bs)))
      } else ends.set(b, await this.reader.read(b * bs, bs))
    }
    if (range !== undefined) await map.loadRange(range[0], range[1])
    return ends
  }

  /**
   * Writes `src` (zeros when undefined) at [offset, offset + length): for each block,
   * finds or makes its dirty slot (filling it, when only part of it is written, from
   * `ends` (readEnds), else from storage, or with zeros) and copies the bytes in. Whole
   * blocks landing in consecutive slots are copied as one run; a run is copied before
   * anything is awaited, so no block is ever mapped to a slot that does not hold its
   * bytes yet when control leaves.
   */
  private async writeBlocks(
    offset: number,
    length: number,
    src: Uint8Array | undefined,
    adopt = false,
    ends?: Map<number, Uint8Array>,
  ): Promise<void> {
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
    const wholeEnd = Math.floor(end / bs)
    for (let b = Math.floor(offset / bs); b * bs < end; b++) {
      const from = Math.max(offset, b * bs)
      const to = Math.min(end, (b + 1) * bs)
      if (src !== undefined && to - from === bs) {
        // Whole blocks that held nothing dirty (an append, or a rewrite of stored data) go
        // as runs: slots taken a run at a time, copied and hashed as one, mapped as one.
        const n = map.freshRun(b, wholeEnd - b)
        if (n > 0) {
          flushRun()
          this.writeFreshRun(b, n, src, b * bs - offset, adopt)
          b += n - 1
          continue
        }
      }
      if (!map.lookup(b, ptr)) {
        flushRun()
        await map.loadLookup(b, ptr)
      }
      const whole = to - from === bs
      let slot = this.slotFor(b, ptr, whole, flushRun, ends?.get(b))
      if (typeof slot !== 'number') slot = await slot
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
    core.grow(end)
  }

  /**
   * Blocks [b, b + n) held nothing dirty and are written whole from `src` at `at`: slots
   * taken a run at a time (adopted from `src` when allowed and long enough), copied and
   * hashed as one, mapped as one.
   */
  private writeFreshRun(b: number, n: number, src: Uint8Array, at: number, adopt: boolean): void {
    const { tier, map } = this.core
    const bs = this.core.blockSize
    for (let k = 0; k < n; ) {
      let slot: number
      if (adopt && n - k >= tier.adoptMinBlocks) slot = tier.adoptRun(src, at + k * bs, n - k)
      else {
        slot = tier.allocRun(n - k)
        tier.writeRun(slot, tier.lastRun, src, at + k * bs)
      }
      const m = tier.lastRun
      map.setRun(b + k, m, 0, DIRTY_BASE + slot)
      k += m
    }
  }

  /**
   * The dirty slot block `b` is written into, mapped to it on return: its own when it has
   * one that may change in place; else a fresh one, holding the block's bytes unless it is
   * written `whole` (copied from the old slot, read from its source or from storage, or
   * zeros for a hole; or `now`, its bytes read before, when given). `ptr` holds the
   * block's pointer (looked up). A number when nothing
   * had to be awaited, so that the caller's pending run stays uncopied only while control
   * stays here; before anything is awaited, or a slot taken out of turn, `flushRun` copies
   * that run.
   */
  private slotFor(
    b: number,
    ptr: [number, number],
    whole: boolean,
    flushRun: () => void,
    now?: Uint8Array,
  ): number | Promise<number> {
    const { tier } = this.core
    const [hi, lo] = ptr
    if (isDirtyRef(hi, lo)) {
      const old = lo - DIRTY_BASE
      if (!tier.pinned(old) && !tier.isRef(old) && !tier.frozen(old)) return old
      // Its slot is being sent or holds adopted bytes (copy-on-write into a fresh one),
      // or it is written by reference (its bytes come from the source into a slot of
      // their own).
      flushRun()
      const slot = tier.alloc()
      if (!whole && now !== undefined) tier.write(slot, 0, now)
      else if (!whole && tier.isRef(old)) return this.slotFromSource(b, ptr, old, slot)
      else if (!whole) tier.copySlot(old, slot)
      return this.remap(b, ptr, old, slot)
    }
    const slot = tier.alloc()
    if (!whole) {
      flushRun()
      if (now !== undefined) tier.write(slot, 0, now)
      else if (hi !== 0 || lo !== 0) return this.slotFromStorage(b, slot)
      else tier.fill(slot, 0, this.core.blockSize, 0)
    }
    return this.remap(b, ptr, -1, slot)
  }

  /** Maps block `b` to `slot`, and releases the slot `old` it was mapped to (−1: none). */
  private remap(b: number, ptr: [number, number], old: number, slot: number): number {
    if (!this.core.map.update(b, 0, DIRTY_BASE + slot)) throw StreamSegmentError.internal(`block ${b}: path unloaded`)
    if (old >= 0 && ptr[0] === 0 && ptr[1] === DIRTY_BASE + old) this.core.tier.release(old)
    return slot
  }

  /** `slot` filled with block `b`'s bytes from the source its slot `old` refers to, then mapped. */
  private async slotFromSource(b: number, ptr: [number, number], old: number, slot: number): Promise<number> {
    const { tier, map } = this.core
    try {
      tier.write(slot, 0, await tier.readRef(old, 0, this.core.blockSize))
    } catch (err) {
      tier.release(slot)
      throw err
    }
    // The source read yielded: an object that completed meanwhile may have stored the
    // block and released its reference (and its leaf may have left the cache). The bytes
    // read are the block's either way.
    if (!map.lookup(b, ptr)) await map.loadLookup(b, ptr)
    return this.remap(b, ptr, old, slot)
  }

  /** `slot` filled with stored block `b`'s bytes, then mapped. */
  private async slotFromStorage(b: number, slot: number): Promise<number> {
    const bs = this.core.blockSize
    try {
      this.core.tier.write(slot, 0, await this.reader.read(b * bs, bs))
    } catch (err) {
      this.core.tier.release(slot)
      throw err
    }
    if (!this.core.map.update(b, 0, DIRTY_BASE + slot)) throw StreamSegmentError.internal(`block ${b}: path unloaded`)
    return slot
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
        // The leaf still growing stays (it is under the limit); should the rest not be
        // enough, it goes too.
        let stored = await writePartials(this.core, true)
        this.partials++
        if (tier.usedBytes > this.dirtyLimit) stored += await writePartials(this.core, false)
        // The store takes objects again: sending ahead, paused after objects failed in a
        // row, goes on (else every crossing of the limit would wait for a partial segment
        // until the flush).
        if (stored > 0) this.sendAhead.resume()
      }
    } else {
      await this.sendAhead.afterWrite()
    }
  }
}

/**
 * ERR_INVALID_ARGUMENT unless [offset, offset + length) is a range of bytes a file can
 * hold: integers ≥ 0, within 2^32 blocks (block indexes are 32 bits on storage). `who`
 * names the call.
 */
export function checkRange(who: string, offset: number, length: number, blockSize: number): void {
  checkBytes(who, 'offset', offset, blockSize)
  checkBytes(who, 'length', length, blockSize)
  if (offset + length > 2 ** 32 * blockSize) {
    throw StreamSegmentError.invalidArgument(
      `${who}: offset ${offset} + length ${length} is past the largest file, ${2 ** 32 * blockSize} bytes at ${blockSize}-byte blocks`,
    )
  }
}

/** ERR_INVALID_ARGUMENT unless `size` is a size a file can have (see checkRange). */
export function checkSize(who: string, size: number, blockSize: number): void {
  checkBytes(who, 'size', size, blockSize)
}

function checkBytes(who: string, name: string, v: unknown, blockSize: number): void {
  const largest = 2 ** 32 * blockSize
  if (typeof v === 'number' && v > largest) {
    throw StreamSegmentError.invalidArgument(
      `${who}: ${name} ${v} is past the largest file, ${largest} bytes at ${blockSize}-byte blocks`,
    )
  }
  if (!Number.isSafeInteger(v) || (v as number) < 0) {
    throw StreamSegmentError.invalidArgument(`${who}: ${name} must be an integer ≥ 0, got ${describeValue(v)}`)
  }
}
