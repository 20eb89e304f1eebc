/**
 * Reads file bytes: dirty blocks from memory, stored blocks from their objects, with few
 * and exact requests. Objects' headers, summaries and node spans are fetched and cached
 * by container/objects.ts; this file plans a read, walks the block map and checks every
 * block it returns.
 *
 * - Nodes. Before reading [from, to) the block map is walked level by level. The nodes a
 *   level needs are fetched together with the unloaded siblings under the same parents
 *   that live in the same object: one ranged GET per object span (≤ NODE_SPAN_BYTES), so
 *   a cold walk fetches each object's index nodes once. Every node is checked against
 *   its parent's entry (decodeNode: CRC, level, cno, key range) before it joins the
 *   BlockMap, whose node cache is bounded (`nodeCacheNodes`). A sibling that fails its
 *   checks is dropped; the walk that needs it later reports it. A leaf span fetched for
 *   a read brings its object's summary along (a tail read, or head first a head read).
 *   Index nodes of part 0 with more index levels under them are read widened downwards
 *   (WIDE_INDEX_BYTES) and the bytes kept (by a few objects at a time: ObjectReads.keepMeta), so
 *   a deep map costs one index read, not one per level.
 *   For a read, part 0's index nodes come in a tail read (its summary along) widened
 *   downwards over the leaves part 0 holds (PART0_LEAVES_BYTES): those of blocks written
 *   again after their object was sent, or changed in a later checkpoint, which name
 *   blocks of older objects. A read under them then costs the index read, that block's
 *   object's summary and its data: 3 requests, as elsewhere. After an open by checkpoint
 *   number, the bytes that open read of part 0 serve that index read (container/objects.ts). A summary fetched along
 *   with nodes that fails its checks fails only the reads of that object's data: the
 *   nodes are then read without it.
 *   A small read (≤ SMALL_READ_BYTES) whose leaves in an object are one span widens that
 *   tail read downwards by its own size: an object's last data blocks lie right before its
 *   meta blocks, so a read across an object's end gets them with the leaf (4 requests: the
 *   index node, two leaf spans, the next object's data; not 5). Of a small object (leaves
 *   starting within SMALL_OBJECT_BYTES) it reads from byte 0, and head first a head read
 *   takes as much data along: a small file's cold read is one GET. The bytes are kept for
 *   the data run (ObjectReads.keptData, a few objects' worth) and checked as a GET's are.
 * - Data. Holes cost nothing; dirty blocks are copied from the dirty tier; stored blocks
 *   contiguous in one object coalesce into one ranged GET of at most `readGetMaxBytes`.
 *   The answer is kept as the chunks it came in (S3Store.getChunks: no copy) and handed
 *   on as views. Data just before its object's meta blocks, of an object whose summary
 *   is not known, comes with that summary in one tail read (a leaf written with the next
 *   object points at the last blocks of this one: a cold read stays at 3 requests).
 *   Every block fetched must sit in a live summary slot naming that block, with a
 *   matching CRC-32 (checked for the whole GET before its bytes are returned: one CRC
 *   over the run against the combination of its blocks' CRCs, block by block on a
 *   mismatch). A run
 *   that fails is fetched once more with its summary (bytes damaged on the way fail the
 *   same checks); failing again it is ERR_CORRUPT naming the key, offset and both CRCs,
 *   never the bytes. An answer that fails its checks, or whose summary's GET fails, is
 *   given back to the pool of GET pieces (util/piece-pool.ts): nobody saw it. So is the
 *   answer of a GET started on a guess (see walk) that no run takes: the guess wrong, the
 *   run at its offset shorter, or the plan failed, the reader cleared or stopped first.
 */

import { setMaxListeners } from 'node:events'
import { NODE_SPAN_BYTES, type NodeSpan, nodeSpans } from '../container/nodes.js'
import {
  HEAD_READ_MAX_BYTES,
  ObjectReads,
  type ObjectState,
  type ReadTiming,
  WIDE_INDEX_BYTES,
} from '../container/objects.js'
import { PART0_LEAVES_BYTES } from '../container/opened.js'
import { mayBeDamagedOnTheWay, StreamSegmentError, throwIfAborted } from '../errors.js'
import { FORMAT_PARTED } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import { type BlockMapNode, decodeNode } from '../format/node.js'
import { hex32, pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
import type { Summary } from '../format/summary.js'
import { type ReadOptions, resolveReadOptions } from '../settings.js'
import { type BlockMap, DIRTY_BASE, isDirtyRef, type MapNode } from '../state/block-map.js'
import type { FileState } from '../state/file-state.js'
import { sliceChunks } from '../util/chunks.js'
import { badBlockIn } from '../util/crc32.js'
import type { Limiter } from '../util/limiter.js'
import { givePieces } from '../util/piece-pool.js'

export type { ReadKind, ReadTiming } from '../container/objects.js'

/** A data run this close to its object's last known meta block comes with the summary, in one tail read. */
const TAIL_DATA_MAX_BYTES = 4 * NODE_SPAN_BYTES

/** A read of at most this much takes as many data bytes below its leaf spans along (see walk). */
const SMALL_READ_BYTES = 64 * 1024
/** An object whose leaves start this low is read whole by a small read's tail read (see fetchNodes). */
const SMALL_OBJECT_BYTES = 128 * 1024

export type { ReadOptions } from '../settings.js'

/** Where `scan` hands the bytes of a range. */
export interface Sink {
  /**
   * The bytes from `at`: views to be done with once the returned promise settles.
   * `stopped` is the scan's signal, aborted at its first failure (see scan): a call under
   * way then is not waited for by anyone told of that failure, and may want to know it.
   */
  bytes(at: number, views: readonly Uint8Array[], stopped: AbortSignal): void | Promise<void>
  /** `length` zeros from `at` (a hole). */
  zeros(at: number, length: number, stopped: AbortSignal): void | Promise<void>
}

/** A contiguous piece of a read, in file order. */
export type Piece =
  | { kind: 'zero'; start: number; end: number }
  | { kind: 'memory'; start: number; end: number; bytes: Uint8Array }
  | { kind: 'data'; start: number; end: number; run: Run }

/** Stored blocks contiguous in one object: `count` slots from byte `at`, holding file blocks `first`…. */
export interface Run {
  key: string
  cno: number
  part: number
  at: number
  first: number
  count: number
}

/** A child entry a walk wants, or may take along. */
interface NodeRef {
  parent: MapNode
  i: number
  hi: number
  lo: number
  key: string
  offset: number
  minKey: number
  upper: number
  needed: boolean
  node?: MapNode
}

/** A node the walk has reached, with the upper bound of its keys (from its parent). */
interface Frontier {
  node: MapNode
  upper: number
}

/** What a walk's reads are for: data under the leaves, and how much (see walk). */
interface WalkWant {
  wantData: boolean
  readBytes: number
  smallRead: boolean
}

export class Reader {
  readonly options: Required<ReadOptions>
  private readonly objects: ObjectReads
  /**
   * A data GET started before the leaf naming its blocks came (`plan` with `guess`; see
   * walk). Its pieces are the reader's until a run that is exactly the guess takes them
   * (fetchBlocksOnce, which clears this first); one that none takes is let go (dropGuess:
   * by the plan that finds no such run, the next plan, a failed plan, or `clear`), its
   * pieces given back once they come.
   */
  private guess: Guess | undefined
  /**
   * Node reads in flight, by parent and entry: a walk that needs a node another walk is
   * reading waits for that read instead of making its own (a read stream walks the next
   * window while the one before is still being walked).
   */
  private readonly reading = new Map<MapNode, Map<number, Promise<void>>>()
  /**
   * The scans under way (see scan) and the signal their requests take, below the file's:
   * the first failure of one aborts it, cutting its other requests short. Scans run one at
   * a time (a handle's calls are serialised; a download makes one); should two overlap,
   * they share it, and the failure of one fails both. Other reads (a read stream's plans and pieces) take the file's signal,
   * which the stream aborts when it fails.
   */
  private scanning: { controller: AbortController; scans: number; done: () => void } | undefined

  constructor(
    private readonly core: FileState,
    options: ReadOptions = {},
  ) {
    this.options = resolveReadOptions(options)
    this.retriesBefore = core.store.retries ?? 0
    this.objects = new ObjectReads(core.store, {
      format: core.format,
      readMaxConcurrency: this.options.readMaxConcurrency,
      readSummaryCacheBytes: this.options.readSummaryCacheBytes,
      signal: () => this.signal,
      mapCno: () => core.base.cno,
      madeHere: (ctimeMs) => core.madeHere(ctimeMs),
      opened: core.opened,
    })
  }

  /** The signal the reader's requests take: the scan's under way, else the file's. */
  private get signal(): AbortSignal {
    return this.scanning?.controller.signal ?? this.core.signal
  }

  /** What reads cost so far. */
  get timing(): ReadTiming {
    const t = this.objects.timing
    t.retries = (this.core.store.retries ?? 0) - this.retriesBefore
    return t
  }

  /** The store's retries when this reader started (its ReadTiming counts from there). */
  private readonly retriesBefore: number

  /** Data GETs; and the walk's node, header and summary reads. */
  get dataLimiter(): Limiter {
    return this.objects.dataLimiter
  }

  get walkLimiter(): Limiter {
    return this.objects.walkLimiter
  }

  private get map(): BlockMap {
    return this.core.map
  }

  /** Forgets cached headers and summaries, and a guess no run took (its pieces go back). */
  clear(): void {
    this.objects.clear()
    this.dropGuess()
  }

  /**
   * Lets the guess go that no run has taken (a run that takes it clears `guess` first):
   * its pieces go back once its answer comes, as nobody else can see them then.
   */
  private dropGuess(): void {
    const g = this.guess
    if (g === undefined) return
    this.guess = undefined
    g.chunks.then((chunks) => {
      if (chunks !== undefined) givePieces(chunks)
    })
  }

  /** The bytes [offset, offset + length) (the caller clips to the file size); holes read as zeros. */
  async read(offset: number, length: number): Promise<Uint8Array> {
    const out = Buffer.allocUnsafe(length)
    await this.readInto(offset, out)
    return out
  }

  /** Fills `out` with the bytes [offset, offset + out.byteLength), as `scan` reads them. */
  readInto(offset: number, out: Uint8Array): Promise<void> {
    const length = out.byteLength
    // The caller's memory may go while the GETs run (its buffer transferred to a worker, or
    // a resizable one shrunk): V8's TypeError, taken for a bug, would end the handle.
    const reachable = () => {
      if (out.byteLength !== length) {
        throw StreamSegmentError.invalidArgument(
          `readInto: the target's ArrayBuffer was detached or shrunk while ${length} bytes at ${offset} were read into it`,
        )
      }
    }
    return this.scan(offset, offset + length, {
      bytes(at, views) {
        reachable()
        let o = at - offset
        for (const v of views) {
          out.set(v, o)
          o += v.byteLength
        }
      },
      zeros(at, n) {
        reachable()
        out.fill(0, at - offset, at - offset + n)
      },
    })
  }

  /**
   * Hands `sink` every byte of [start, end) (the caller clips to the file size), in no
   * particular order: holes as `zeros`, other bytes as `bytes` views, each data run
   * checked first. The range is planned a window at a time (readGetMaxBytes ×
   * readMaxConcurrency), the next window's walk under way while the data runs of those
   * before it are fetched by at most readMaxConcurrency workers, and never more than a
   * window of pieces planned that no worker has taken (what a scan holds is bounded by
   * its windows, not by its range); a GET's pieces are given
   * back once `bytes` has settled, so the sink must be done with the views by then. After
   * a failure nothing new is started and the scan's requests still in flight are aborted
   * (they have their own signal, below the file's): a stalled GET beside the one that
   * failed neither holds the failure back nor runs on after it. It settles once no sink
   * call is under way, without waiting for a request that does not hear the abort (its
   * answer, if it comes, goes to no sink), and fails when the file's signal fires.
   */
  async scan(start: number, end: number, sink: Sink): Promise<void> {
    let scope = this.scanning
    if (scope === undefined) {
      const controller = new AbortController()
      // Every request of the scan listens to it (readMaxConcurrency data GETs and as many
      // walk reads): not a leak, which Node's warning past 10 listeners would suggest.
      setMaxListeners(1024, controller.signal)
      const signal = this.core.signal
      const onAbort = () => controller.abort(signal.reason)
      if (signal.aborted) onAbort()
      else signal.addEventListener('abort', onAbort, { once: true })
      scope = { controller, scans: 0, done: () => signal.removeEventListener('abort', onAbort) }
      this.scanning = scope
    }
    scope.scans++
    try {
      await this.scanWithin(start, end, sink, scope)
    } finally {
      if (--scope.scans === 0) {
        scope.done()
        if (this.scanning === scope) this.scanning = undefined
      }
    }
  }

  private async scanWithin(
    start: number,
    end: number,
    sink: Sink,
    scope: { controller: AbortController },
  ): Promise<void> {
    const window = this.options.readGetMaxBytes * this.options.readMaxConcurrency
    /** The scan's signal: its requests take it, and the sink is told its failure by it. */
    const stopped = scope.controller.signal
    /** The pieces planned, from `next` those no worker has taken yet (`waiting` bytes of them). */
    let pieces: Piece[] = []
    let next = 0
    let waiting = 0
    let planned = false
    let failure: { err: unknown } | undefined
    /** Wakes the workers waiting for pieces (more planned, the plan done or failed). */
    let wake: () => void = () => {}
    let more = new Promise<void>((r) => {
      wake = r
    })
    const announce = () => {
      const woken = wake
      more = new Promise<void>((r) => {
        wake = r
      })
      woken()
    }
    /** Sink calls under way; once the scan has failed, it settles when none is (`idle`). */
    let sinking = 0
    let onIdle: () => void = () => {}
    const idle = new Promise<void>((r) => {
      onIdle = r
    })
    /** The first failure: the scan's other requests are cut short, the workers waiting woken. */
    const fail = (err: unknown) => {
      if (failure !== undefined) return
      failure = { err }
      scope.controller.abort(err)
      announce()
      taken()
      if (sinking === 0) onIdle()
    }
    /** `call` of the sink, counted (see `idle`). */
    const sinkCall = async (call: () => void | Promise<void>) => {
      sinking++
      try {
        await call()
      } finally {
        if (--sinking === 0 && failure !== undefined) onIdle()
      }
    }
    /** Wakes the planner waiting for the workers to take pieces. */
    let taken: () => void = () => {}
    const planner = async () => {
      try {
        for (let at = start; at < end && failure === undefined; at += window) {
          // At most a window planned ahead of the workers: the pieces (one per block where
          // blocks are not contiguous) and the bytes copied from memory are bounded by it,
          // not by the range (a download of a whole file is one scan).
          while (waiting >= window && failure === undefined) {
            await new Promise<void>((r) => {
              taken = r
            })
          }
          if (failure !== undefined) break
          for (const p of await this.plan(at, Math.min(end, at + window))) {
            pieces.push(p)
            waiting += p.end - p.start
          }
          announce()
        }
      } catch (err) {
        fail(err)
      }
      planned = true
      announce()
    }
    const worker = async () => {
      while (failure === undefined) {
        if (next === pieces.length) {
          if (planned) return
          await more
          continue
        }
        const p = pieces[next++] as Piece
        waiting -= p.end - p.start
        if (next >= 1024 && next * 2 >= pieces.length) {
          pieces = pieces.slice(next) // the pieces taken go, so what is held stays bounded too
          next = 0
        }
        taken()
        try {
          if (p.kind === 'zero') await sinkCall(() => sink.zeros(p.start, p.end - p.start, stopped))
          else if (p.kind === 'memory') await sinkCall(() => sink.bytes(p.start, [p.bytes], stopped))
          else {
            const chunks = await this.fetchBlocks(p.run)
            const base = p.run.first * this.core.blockSize
            try {
              // Come after the scan failed (and maybe settled): the sink is not called again.
              if (failure === undefined) {
                await sinkCall(() => sink.bytes(p.start, sliceChunks(chunks, p.start - base, p.end - base), stopped))
              }
            } finally {
              givePieces(chunks) // done with: the store's pieces can be read into again
            }
          }
        } catch (err) {
          fail(err)
        }
      }
    }
    // The scan's signal (the file aborted, or a failed scan sharing it) fails it at once: a
    // request that does not hear the signal (a custom store's, a read blocked on a hung
    // mount) is not waited for, nor is the plan or worker awaiting it.
    const onAbort = () => fail(stopped.reason)
    if (stopped.aborted) onAbort()
    else stopped.addEventListener('abort', onAbort, { once: true })
    const all = Promise.all([planner(), ...Array.from({ length: this.options.readMaxConcurrency }, worker)])
    try {
      // Failed, it settles once no sink call is under way, not when every request has ended.
      await Promise.race([all, idle])
    } finally {
      stopped.removeEventListener('abort', onAbort)
    }
    if (failure !== undefined) throw failure.err
  }

  /**
   * The pieces of [start, end): walks the block map (fetching nodes), then cuts the range
   * into holes, bytes from memory (copied now) and runs of stored blocks. Fetches no data,
   * but with `guess` (a read stream's first window): the range's data GET starts with the
   * leaf read, on a guess of where the leaf's object holds it (see walk); the run that
   * comes out exactly so takes that GET's answer, checked as any is.
   */
  async plan(start: number, end: number, guess = false): Promise<Piece[]> {
    const bs = this.core.blockSize
    const first = Math.floor(start / bs)
    const last = Math.ceil(end / bs)
    this.dropGuess() // an earlier plan's, which none of its runs took
    try {
      await this.walk(first, last, true, guess)
      const pieces = await this.cut(start, end)
      // A guess that none of the runs is (wrong, or the run at its offset shorter) is never taken.
      const g = this.guess
      if (g !== undefined && !pieces.some((p) => p.kind === 'data' && guessed(g, p.run, bs))) this.dropGuess()
      return pieces
    } catch (err) {
      this.dropGuess()
      throw err
    }
  }

  /** The pieces of [start, end) once the walk has brought their leaves (see plan). */
  private async cut(start: number, end: number): Promise<Piece[]> {
    const bs = this.core.blockSize
    const first = Math.floor(start / bs)
    const last = Math.ceil(end / bs)
    const { map, tier } = this.core
    const pieces: Piece[] = []
    const ptr: [number, number] = [0, 0]
    const max = Math.max(1, Math.floor(this.options.readGetMaxBytes / bs))
    let run: Run | undefined
    let piece: Piece | undefined
    const t = this.timing
    // The leaf entry of the previous block: when the leaf's next key is this block, that
    // entry is its pointer (keys are unique in the tree), with no descent from the root.
    let leaf: MapNode | undefined
    let li = -1
    for (let b = first; b < last; b++) {
      let hi: number
      let lo: number
      if (leaf !== undefined && li + 1 < leaf.count && leaf.keys[li + 1] === b) {
        li++
        hi = leaf.hi[li] as number
        lo = leaf.lo[li] as number
      } else {
        if (map.lookup(b, ptr)) leaf = map.leafOf(b)
        else {
          // Read from the leaf the load reached: another walk (a read stream's next window)
          // may let it go from the cache before this resumes.
          t.nodeFallbacks++
          leaf = await map.loadLookup(b, ptr)
        }
        ;[hi, lo] = ptr
        if (hi === 0 && lo === 0) leaf = undefined // holes: no entry to follow
        li = leaf === undefined ? -1 : leaf.search(b)
      }
      const from = Math.max(start, b * bs)
      const to = Math.min(end, (b + 1) * bs)
      if (hi === 0 && lo === 0) {
        t.holeBlocks++
        if (piece?.kind === 'zero' && piece.end === from) piece.end = to
        else pieces.push((piece = { kind: 'zero', start: from, end: to }))
        continue
      }
      if (isDirtyRef(hi, lo)) {
        t.memoryBlocks++
        const slot = lo - DIRTY_BASE
        let bytes: Uint8Array
        if (tier.isRef(slot)) {
          bytes = await tier.readRef(slot, from - b * bs, to - from)
          leaf = undefined // the map may have changed meanwhile
        } else {
          const so = tier.offset(slot) + (from - b * bs)
          bytes = Buffer.from(tier.slab(slot).subarray(so, so + (to - from)))
        }
        pieces.push((piece = { kind: 'memory', start: from, end: to, bytes }))
        continue
      }
      t.storedBlocks++
      const part = pointerPart(lo)
      const at = pointerUnit(lo) * UNIT_BYTES
      if (
        piece?.kind === 'data' &&
        run !== undefined &&
        run.cno === hi &&
        run.part === part &&
        run.at + run.count * bs === at &&
        run.first + run.count === b &&
        run.count < max
      ) {
        run.count++
        piece.end = to
        continue
      }
      run = { key: segmentKey(hi, part), cno: hi, part, at, first: b, count: 1 }
      pieces.push((piece = { kind: 'data', start: from, end: to, run }))
    }
    return pieces
  }

  /**
   * The bytes of a data piece: views of the GET's answer as it came (no copy), in order,
   * every block of the run checked before any is returned. The caller owns the store's
   * pieces under them, and may give them back (util/piece-pool.ts) once done with these.
   */
  async fetchPiece(p: Piece & { kind: 'data' }): Promise<Uint8Array[]> {
    const chunks = await this.fetchBlocks(p.run)
    const base = p.run.first * this.core.blockSize
    return sliceChunks(chunks, p.start - base, p.end - base)
  }

  /** The run's blocks (the GET's answer as it came), each checked against the object's summary. */
  private async fetchBlocks(r: Run): Promise<Uint8Array[]> {
    try {
      return await this.fetchBlocksOnce(r)
    } catch (err) {
      if (!mayBeDamagedOnTheWay(err)) throw err
      // Bytes damaged on the way (a flipped bit, a cut answer) fail the same checks as
      // bytes damaged on storage: fetch the run and its summary once more before saying so.
      this.objects.forget(r.key)
      return this.fetchBlocksOnce(r)
    }
  }

  private async fetchBlocksOnce(r: Run): Promise<Uint8Array[]> {
    const bs = this.core.blockSize
    const st = this.objects.state(r.key, r.cno, r.part)
    const length = r.count * bs
    // Bytes here already: the answer of the GET started on a guess, or data below a leaf span.
    const g = this.guess
    let have: Uint8Array[] | undefined
    if (g !== undefined && guessed(g, r, bs)) {
      this.guess = undefined // this run's now, whatever comes: nobody else gives its pieces back
      have = await g.chunks
      // Stopped meanwhile (the file aborted or closed, a stream destroyed), the run fails as
      // its own GET would have: what asked for it may no longer be there to give them back.
      if (this.signal.aborted) {
        if (have !== undefined) givePieces(have)
        throwIfAborted(this.signal, `read of ${this.core.store.url}/${r.key} at ${r.at}`)
      }
    }
    if (have === undefined) {
      const kept = this.objects.keptData(st, r.at, r.at + length)
      if (kept !== undefined) have = [kept]
    }
    // Data just before the object's meta blocks, of an object whose summary is unknown:
    // one tail read brings both (a cold read into the last blocks of an object, whose
    // leaf was written with the next one, costs one request, not two).
    const tail =
      st.summary === undefined &&
      st.pending === undefined &&
      this.core.format !== FORMAT_PARTED &&
      st.maxMeta >= r.at + length &&
      st.maxMeta - r.at <= TAIL_DATA_MAX_BYTES
    const minSlots = Math.ceil((r.at + length) / bs)
    const [chunks, summary] =
      have === undefined && tail
        ? await this.objects.readDataWithSummary(st, r.at, r.at + length).then((t) => [t.chunks, t.summary] as const)
        : await withSummary(
            have === undefined ? this.objects.readData(st, r.at, r.at + length) : Promise.resolve(have),
            this.objects.summaryOf(st, minSlots),
          )
    try {
      return await this.checkBlocks(r, st, chunks, summary)
    } catch (err) {
      givePieces(chunks) // failed its checks: nobody sees these bytes
      throw err
    }
  }

  /** `chunks` (the bytes of run `r`), once every block checks out against `summary`. */
  private async checkBlocks(r: Run, st: ObjectState, chunks: Uint8Array[], summary: Summary): Promise<Uint8Array[]> {
    const bs = this.core.blockSize
    const length = r.count * bs
    const where = `${this.core.store.url}/${r.key}`
    let got = 0
    for (const c of chunks) got += c.byteLength
    if (got !== length) {
      throw StreamSegmentError.corrupt(`${where}: read ${got} bytes at ${r.at}, expected ${length}`)
    }
    // The summary came with the header: head first, the data region starts after the meta blocks.
    const dataOffset = this.objects.dataOffset(st)
    for (let i = 0; i < r.count; i++) {
      const b = r.first + i
      const at = r.at + i * bs
      const k = (at - dataOffset) / bs
      if (!Number.isInteger(k) || k < 0 || k >= summary.count) {
        throw StreamSegmentError.corrupt(
          `${where}: block ${b} points at offset ${at}, not one of the object's ${summary.count} data slots of ${bs} bytes`,
        )
      }
      if (summary.blockIndex[k] !== b || summary.live[k] !== 1) {
        throw StreamSegmentError.corrupt(
          `${where}: slot ${k} (offset ${at}) holds block ${summary.blockIndex[k]}${summary.live[k] ? '' : ' (dead)'}, the block map says block ${b}`,
        )
      }
    }
    // Every block against its CRC: one CRC of the run's bytes (a long run's on the thread
    // pool, so the event loop goes on with the other answers meanwhile), compared with the
    // CRC its blocks' CRCs combine to (four table lookups per block); only a run that
    // fails is checked block by block, to name the block. Against damage this misses what
    // one CRC-32 misses (1 in 2^32 of random errors). A change crafted across two blocks
    // can keep the run's CRC and not each block's, but a CRC is no defence against crafted
    // bytes anyway: whoever can write the object can seal its summary and header again.
    const k0 = (r.at - dataOffset) / bs
    const bad = await badBlockIn(chunks, summary.crc, k0, r.count, bs)
    if (bad === undefined) return chunks
    if (bad.index >= 0) {
      const i = bad.index
      throw StreamSegmentError.corrupt(
        `${where}: block ${r.first + i} at offset ${r.at + i * bs} has CRC-32 ${hex32(bad.crc)}, the summary says ${hex32(summary.crc[k0 + i] as number)}`,
      )
    }
    throw StreamSegmentError.corrupt(`${where}: blocks at offset ${r.at}: the run's CRC-32 does not match its blocks'`)
  }

  // --- the walk ---

  /**
   * Brings into memory every node on the paths to blocks [from, to), level by level,
   * fetching per object one span of the needed nodes and their unloaded siblings.
   * `wantData`: the caller will read data under the leaves, so a leaf span of a data part
   * is fetched as a tail read that brings the object's summary along.
   */
  async walk(from: number, to: number, wantData: boolean, guess = false): Promise<void> {
    const readBytes = (to - from) * this.core.blockSize
    const want: WalkWant = { wantData, readBytes, smallRead: wantData && readBytes <= SMALL_READ_BYTES }
    let frontier: Frontier[] = [{ node: this.map.root, upper: 2 ** 32 }]
    while (frontier.length > 0 && (frontier[0] as Frontier).node.level > 0) {
      const level = (frontier[0] as Frontier).node.level
      const { next, byObject, awaited, others } = this.childrenOf(frontier, from, to)
      const fetches: Promise<void>[] = []
      /** The nodes this round reads (those of objects with a needed node), for other walks to wait for. */
      const read: NodeRef[] = []
      for (const refs of byObject.values()) {
        if (!refs.some((r) => r.needed)) continue
        // One by one, not push(...): a level may point into one object from as many entries
        // as the window has blocks, beyond what a call's arguments may hold.
        for (const r of refs) read.push(r)
        for (const f of this.fetchNodes(refs, level, want)) fetches.push(f)
      }
      if (guess && level === 1) this.guessData(byObject, from, to)
      const done = this.noteReading(read, fetches)
      try {
        await Promise.all([...fetches, ...others])
      } finally {
        done()
      }
      for (const refs of byObject.values()) {
        for (const r of refs) if (r.needed && r.node !== undefined) next.push({ node: r.node, upper: r.upper })
      }
      // A node another walk read: attached to its parent by that walk (when it checked out).
      for (const a of awaited) {
        const c = a.parent.children?.[a.i]
        if (c !== undefined) next.push({ node: c, upper: a.upper })
      }
      frontier = next
    }
  }

  /**
   * The children of the frontier's nodes on the paths to blocks [from, to): those in
   * memory (`next`), those to fetch with their unloaded siblings, by object (`byObject`;
   * `needed` marks those on the paths), and those another walk is reading (`awaited`,
   * with those reads in `others`).
   */
  private childrenOf(
    frontier: readonly Frontier[],
    from: number,
    to: number,
  ): {
    next: Frontier[]
    byObject: Map<string, NodeRef[]>
    awaited: Array<{ parent: MapNode; i: number; upper: number }>
    others: Promise<void>[]
  } {
    const next: Frontier[] = []
    const byObject = new Map<string, NodeRef[]>()
    const awaited: Array<{ parent: MapNode; i: number; upper: number }> = []
    const others: Promise<void>[] = []
    for (const { node, upper } of frontier) {
      if (node.count === 0 || node.children === undefined) continue
      const firstChild = node.childIndex(from)
      for (let i = 0; i < node.count; i++) {
        const inRange = i >= firstChild && (node.keys[i] as number) < to
        const childUpper = i + 1 < node.count ? (node.keys[i + 1] as number) : upper
        const c = node.children[i]
        if (c !== undefined) {
          if (inRange) {
            next.push({ node: c, upper: childUpper })
            this.timing.nodeCacheHits++
          }
          continue
        }
        const hi = node.hi[i] as number
        const lo = node.lo[i] as number
        if (hi === 0) continue // not a stored node: BlockMap.load reports it if needed
        const inFlight = this.reading.get(node)?.get(i)
        if (inFlight !== undefined) {
          if (inRange) {
            awaited.push({ parent: node, i, upper: childUpper })
            others.push(inFlight) // what failed it fails this walk too
          }
          continue
        }
        const part = pointerPart(lo)
        const key = segmentKey(hi, part)
        const offset = pointerUnit(lo) * UNIT_BYTES
        const st = this.objects.state(key, hi, part)
        if (offset > st.maxMeta) st.maxMeta = offset
        const ref: NodeRef = {
          parent: node,
          i,
          hi,
          lo,
          key,
          offset,
          minKey: node.keys[i] as number,
          upper: childUpper,
          needed: inRange,
        }
        const list = byObject.get(key)
        if (list === undefined) byObject.set(key, [ref])
        else list.push(ref)
      }
    }
    return { next, byObject, awaited, others }
  }

  /**
   * The reads of one object's nodes `refs` (children of nodes at `level`): one per span,
   * the summary along with a leaf span when the walk wants data, part 0's index nodes
   * widened downwards (see the file's comment).
   */
  private fetchNodes(refs: readonly NodeRef[], level: number, want: WalkWant): Promise<void>[] {
    const first = refs[0] as NodeRef
    const st = this.objects.state(first.key, first.hi, pointerPart(first.lo))
    const spans = nodeSpans(refs, this.core.settings.metaBlockSize, NODE_SPAN_BYTES)
    const leaves = level === 1
    const withSummary = leaves && want.wantData && st.summary === undefined && st.pending === undefined
    if (this.core.format === FORMAT_PARTED) {
      // Head first: header and summary lie before the first span. A small read of a small
      // object (its leaves end within SMALL_OBJECT_BYTES) takes its data along: the data
      // region follows the meta blocks.
      const firstSpan = spans[0] as NodeSpan<NodeRef>
      const head = withSummary && firstSpan.end <= HEAD_READ_MAX_BYTES
      const after = head && spans.length === 1 && want.smallRead && firstSpan.end <= SMALL_OBJECT_BYTES
      return spans.map((span) =>
        head && span === firstSpan
          ? this.fetchSpanWithSummary(st, span, 0, after ? SMALL_OBJECT_BYTES : 0)
          : this.fetchSpanAgain(st, span, 0),
      )
    }
    // A data part holds only leaves before its summary; part 0 index nodes too, which
    // the walk has seen from above (maxMeta), so its tail is bounded when they are near.
    const lastSpan = spans[spans.length - 1] as NodeSpan<NodeRef>
    const partTail = st.part === 0 && st.maxMeta + this.core.settings.metaBlockSize - lastSpan.start <= NODE_SPAN_BYTES
    const tail = withSummary && (st.part !== 0 || partTail)
    // Index nodes of part 0 with more index levels under them: one read widened
    // downwards brings those levels along (a deep map costs one index read, not one per level).
    const widen = level >= 3 && st.part === 0 ? WIDE_INDEX_BYTES : 0
    // Index nodes of part 0 over leaves, for a read: a tail read widened downwards
    // brings the leaves part 0 holds (those of blocks written since the objects before
    // it, the file's last blocks) and its summary, so a read under them needs no leaf
    // read of its own.
    const indexTail =
      level >= 2 && st.part === 0 && want.wantData && st.summary === undefined && st.pending === undefined && partTail
    // A small read whose leaves are one span: the data blocks just below it (where the
    // last blocks under the object's leaves lie) come along in the same tail read, so a
    // read across an object's end gets that object's data with its leaf. Of a small
    // object (its leaves start within SMALL_OBJECT_BYTES), all of its data comes: a cold
    // read of a small file is one GET, not the leaf's and then the data's.
    const small = lastSpan.start <= SMALL_OBJECT_BYTES ? lastSpan.start : 0
    const below = tail && spans.length === 1 && want.smallRead ? Math.max(want.readBytes, small) : 0
    return spans.map((span) => {
      if (span !== lastSpan || !(tail || indexTail)) return this.fetchSpanAgain(st, span, widen)
      return indexTail
        ? this.fetchSpanWithSummary(st, span, Math.max(widen, PART0_LEAVES_BYTES), 0, widen)
        : this.fetchSpanWithSummary(st, span, widen, below, widen)
    })
  }

  /**
   * fetchSpan with the object's summary along. A summary that fails its checks must fail
   * only the reads of this object's data (a leaf may name blocks of other objects): the
   * nodes are then read without it, widened by `retryWiden`.
   */
  private fetchSpanWithSummary(
    st: ObjectState,
    span: NodeSpan<NodeRef>,
    widen: number,
    data: number,
    retryWiden = 0,
  ): Promise<void> {
    return this.fetchSpan(st, span, true, widen, data).catch((err) => {
      if (!mayBeDamagedOnTheWay(err)) throw err
      st.metaBytes = undefined // read again, not taken from the bytes that failed
      return this.fetchSpan(st, span, false, retryWiden)
    })
  }

  /**
   * fetchSpan without the summary, once more when it fails its checks: bytes damaged on
   * the way (a flipped bit) fail them as bytes damaged on storage do, and a data run is
   * fetched again too before it is reported (fetchBlocks). Not from the bytes kept of a
   * widened read: they may be what failed.
   */
  private fetchSpanAgain(st: ObjectState, span: NodeSpan<NodeRef>, widen: number): Promise<void> {
    return this.fetchSpan(st, span, false, widen).catch((err) => {
      if (!mayBeDamagedOnTheWay(err)) throw err
      st.metaBytes = undefined
      return this.fetchSpan(st, span, false, widen)
    })
  }

  /**
   * Records that nodes `refs` are being read by `reads` until they settle, so that another
   * walk needing them waits for those reads; returns what forgets them.
   */
  private noteReading(refs: readonly NodeRef[], reads: Promise<void>[]): () => void {
    if (reads.length === 0) return () => {}
    const all = Promise.all(reads).then(() => undefined)
    all.catch(() => undefined) // the walk making them awaits and reports them
    for (const r of refs) {
      let m = this.reading.get(r.parent)
      if (m === undefined) this.reading.set(r.parent, (m = new Map()))
      m.set(r.i, all)
    }
    return () => {
      for (const r of refs) {
        const m = this.reading.get(r.parent)
        if (m?.get(r.i) !== all) continue
        m.delete(r.i)
        if (m.size === 0) this.reading.delete(r.parent)
      }
    }
  }

  /**
   * Starts the data GET of blocks [from, to) before the leaf naming them is read, on a
   * guess: the leaf holding `from` is the first of a data part's leaves (the one before it
   * under the same parent lies in another object), and that object holds its data in key
   * order from its start up to that leaf, as a file written front to back does (a leaf
   * goes with its data, placed in leaf order, the leaves right after the data). A wrong
   * guess costs that GET; nothing uses its bytes unless the map then puts the run exactly
   * there, and they are checked as any are.
   */
  private guessData(byObject: Map<string, NodeRef[]>, from: number, to: number): void {
    // Head first, an object's data lies after its header, summary and meta blocks.
    if (this.core.format === FORMAT_PARTED) return
    const bs = this.core.blockSize
    for (const refs of byObject.values()) {
      const r = refs.find((x) => x.needed && x.minKey <= from && from < x.upper)
      if (r === undefined) continue
      const part = pointerPart(r.lo)
      const p = r.parent
      const before = r.i > 0 && (p.hi[r.i - 1] as number) === r.hi && pointerPart(p.lo[r.i - 1] as number) === part
      // The object's data ends where its meta blocks start, with its first leaf. The plan
      // cuts runs at readGetMaxBytes: a guess past that would match no run (a window of
      // 1 MiB and GETs of 256 KiB), and its GET would be thrown away.
      const at = (from - r.minKey) * bs
      const blocks = Math.min(to - from, Math.max(1, Math.floor(this.options.readGetMaxBytes / bs)))
      const end = Math.min(at + blocks * bs, r.offset)
      if (part === 0 || before || end <= at) return
      const st = this.objects.state(r.key, r.hi, part)
      const chunks = this.objects.readData(st, at, end).catch(() => undefined)
      this.dropGuess()
      this.guess = { key: r.key, at, end, chunks }
      return
    }
  }

  /**
   * Fetches one span of nodes (with the summary when `withSummary`: a tail read, or head
   * first a head read) and attaches those that check out.
   */
  private async fetchSpan(
    st: ObjectState,
    span: NodeSpan<NodeRef>,
    withSummary: boolean,
    widen = 0,
    data = 0,
  ): Promise<void> {
    const mbs = this.core.settings.metaBlockSize
    const bytes = await this.objects.readNodeSpan(st, span, withSummary, widen, data)
    // The object's header on its way (another span's tail or head read, or another walk's):
    // waited for, so that the nodes are checked against its meta blocks, for no request.
    await this.objects.headerInFlight(st)
    const maxCno = this.core.maxCno
    for (const r of span.refs) {
      const at = r.offset - span.start
      const where = `${this.core.store.url}/${r.key} meta block at ${r.offset}`
      let decoded: BlockMapNode
      try {
        if (at + mbs > bytes.byteLength) {
          throw StreamSegmentError.corrupt(`${where}: the object ends at ${span.start + bytes.byteLength}`)
        }
        this.objects.checkNodeOffset(st, r.offset)
        decoded = decodeNode(bytes.subarray(at, at + mbs), {
          level: r.parent.level - 1,
          minKey: r.minKey,
          maxKeyExclusive: this.map.storedUpper(r.hi, r.upper),
          cno: r.hi,
          maxCno,
          where,
        })
      } catch (err) {
        if (r.needed) throw err
        continue
      }
      const p = r.parent
      if (p.children?.[r.i] === undefined && p.hi[r.i] === r.hi && p.lo[r.i] === r.lo && p.keys[r.i] === r.minKey) {
        r.node = this.map.attach(p, r.i, decoded)
      } else {
        r.node = p.children?.[r.i] // loaded meanwhile, or the tree changed: the walk's fallback loads it
      }
    }
  }
}

/** A data GET started on a guess (see Reader.guessData): what it reads, and its answer (undefined: it failed). */
interface Guess {
  key: string
  at: number
  end: number
  chunks: Promise<Uint8Array[] | undefined>
}

/** Whether run `r` is exactly the bytes guess `g` reads. */
function guessed(g: Guess, r: Run, bs: number): boolean {
  return g.key === r.key && g.at === r.at && g.end === r.at + r.count * bs
}

/**
 * A run's data and its object's summary, fetched at once. The summary failing, the data's
 * pieces go back once they come (util/piece-pool.ts): nobody sees them.
 */
function withSummary(data: Promise<Uint8Array[]>, summary: Promise<Summary>): Promise<[Uint8Array[], Summary]> {
  const both = Promise.all([data, summary])
  both.catch(() => data.then(givePieces, () => undefined))
  return both
}
