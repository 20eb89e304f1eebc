/**
 * `createStreamSegmentReadStream`: a streamx Readable of a container's file (or a byte
 * range of it) at its latest checkpoint, or at checkpoint `cno`.
 *
 * - A thin adapter over a read-only SegmentFile and a Reader: `_open` opens the file,
 *   `_read` pushes the next piece, in file order.
 * - Read-ahead: the range is planned a window at a time (Reader.plan: holes, data runs
 *   of at most `readGetMaxBytes`): the first window is one short GET (1 MiB), started
 *   with the read of its leaf on a guess of where the data lies (Reader.plan), and its
 *   piece is pushed as soon as it is checked; the second window (one GET short of the
 *   read-ahead) is walked beside the first, its leaves read in the same round trip; the
 *   next windows are the whole read-ahead, each walked while the GETs of the one before
 *   run. A window that fails to plan fails the stream before anything after it is
 *   planned or pushed. Data runs are fetched ahead of the consumer, so
 *   several GETs are in flight (at most `readMaxConcurrency` data GETs; the walk of the
 *   next window runs beside them, in slots of its own). Memory bound: the runs
 *   fetched or in flight and not yet pushed hold at most `readAheadBytes` (default
 *   readGetMaxBytes × readMaxConcurrency, 160 MiB: enough for every GET allowed in
 *   flight) plus two runs: the last one started, which may pass the bound, and the one
 *   being handed over, no longer counted once taken off the queue (each at most
 *   readGetMaxBytes). The stream's own buffer is `highWaterMark`. The consumer's
 *   backpressure stops `_read`, and with it the read-ahead.
 * - The consumer gets buffers of its own: a GET's pooled pieces are copied as they are
 *   pushed, four to a buffer, one buffer per `_read` (so the copies made ahead of the
 *   consumer stay within `highWaterMark`), and given back to be read into again
 *   (util/piece-pool.ts); other answers are pushed as they are. A chunk the consumer keeps
 *   stays as it is, whatever is read after it.
 * - `start` and `end` are byte offsets, `end` inclusive, as in `fs.createReadStream` and
 *   HTTP ranges; both are clipped to the file, and a start at or past its end gives an
 *   empty stream. An end before the start is refused, as `fs.createReadStream` refuses it.
 * - The AbortSignal, `destroy()` or a failed read aborts every request in flight (the
 *   open's too) and ends the stream, without waiting for a request that does not hear the
 *   abort (a custom store's): ERR_ABORTED for the signal, `destroy(err)`'s own err,
 *   and for a `destroy()` without one streamx's STREAM_DESTROYED, for which it emits no
 *   'error' (as when a consumer breaks out of a `for await`). The pieces fetched ahead go
 *   back to be read into again. The signal's listener goes when the stream closes.
 */
import { Readable } from 'streamx'
import { StreamSegmentError } from '../errors.js'
import { type Piece, Reader, type ReadTiming } from '../read/reader.js'
import { fileState, SegmentFile } from '../segment-file.js'
import { checkByteRange, checkOptionNames, givenOr, type ReadOptions, resolveReadOptions } from '../settings.js'
import type { ObjectStore } from '../store/types.js'
import { givePieces, isLentPiece } from '../util/piece-pool.js'
import { unlessAborted } from '../util/signals.js'
import { asError, describeValue } from '../util/typed-arrays.js'
import { checkStreamOptions, countingStore, destroyOnAbort, type StreamLocation, storeOf, withOpen } from './options.js'

const MiB = 1024 * 1024
/** Zeros of a hole are pushed in pieces of at most this. */
const ZERO_CHUNK = MiB
/** The first window planned (and so the first data GET at most): small, for an early first byte. */
const FIRST_WINDOW_BYTES = MiB
/**
 * A GET's pooled pieces reach the consumer copied, four 64 KiB pieces to a buffer: a
 * quarter of the buffers to allocate, push and collect, as one per piece. Read from the
 * directory store, the stream's CPU per GiB fell by about a sixth; over radosgw the
 * difference was lost in the server's noise (docs/benchmarks.md, "Reads").
 */
const HANDOVER_BYTES = 256 * 1024

export interface ReadStreamOptions extends ReadOptions, StreamLocation {
  /** First byte (default 0) and last byte, inclusive (default the file's last). */
  start?: number
  end?: number
  /** Read this checkpoint instead of the latest. */
  cno?: number
  signal?: AbortSignal
  /** Bytes fetched ahead of the consumer (default readGetMaxBytes × readMaxConcurrency). */
  readAheadBytes?: number
  /** The stream's own buffer, in bytes (default 1 MiB). */
  highWaterMark?: number
}

type Callback = (err: Error | null) => void

interface Handing {
  views: Uint8Array[]
  /** The first view not pushed yet. */
  at: number
}

interface Ahead {
  size: number
  /** The bytes: one view, or views in order (a GET's body as it came, checked). */
  bytes: Promise<Uint8Array | Uint8Array[]> | (() => Uint8Array)
}

export class StreamSegmentReadStream extends Readable {
  file: SegmentFile | undefined
  private reader: Reader | undefined
  readonly store: ObjectStore
  /** Bytes pushed so far. */
  bytesRead = 0
  /** The file's size at the checkpoint read, once open. */
  size = -1
  private readonly options: ReadStreamOptions
  private readonly readAheadBytes: number
  private openRequests = { requests: 0, bytes: 0 }
  /**
   * Aborted when the stream ends before its range's end (destroy(), the signal, a failure).
   * It aborts the open's requests, and `_open` and `_read` call back at once when it fires:
   * streamx holds the stream's close until they have, and a request that does not hear
   * its signal (a read blocked on a hung network mount) would hold it for as long as it
   * does not answer.
   */
  private readonly stopping = new AbortController()
  private pos = 0
  private end = 0
  private planned: Piece[] = []
  private queue: Ahead[] = []
  private ahead = 0
  private filling: Promise<void> | undefined
  private planning: Promise<void> | undefined
  private plannedBytes = 0
  /** The size of the next window planned: 0 before the first (FIRST_WINDOW_BYTES); the second's, then window(). */
  private nextWindow = 0
  /** The walk of the second window made beside the first's plan, until the second is planned. */
  private walkBeside: Promise<void> | undefined
  private fillError: unknown
  /** The GET whose chunks are being pushed, one per `_read`, and how far. */
  private handing: Handing | undefined
  /** The whole range pushed: nothing is in flight, nothing to abort. */
  private ended = false

  constructor(options: ReadStreamOptions) {
    checkStreamOptions('createStreamSegmentReadStream', options)
    checkOptionNames(
      'createStreamSegmentReadStream',
      options,
      ['url', 'store', 'start', 'end', 'cno', 'signal', 'readAheadBytes', 'highWaterMark'],
      { read: true },
    )
    const { url, store, signal, highWaterMark = MiB } = options
    super({ highWaterMark })
    checkByteRange('createStreamSegmentReadStream', options)
    const read = resolveReadOptions(options) // validates before any request
    const ahead = givenOr(options.readAheadBytes, read.readGetMaxBytes * read.readMaxConcurrency)
    if (!Number.isSafeInteger(ahead) || ahead < 0) {
      throw StreamSegmentError.invalidArgument(
        `createStreamSegmentReadStream: readAheadBytes ${describeValue(ahead)} must be a byte count (an integer ≥ 0)`,
      )
    }
    this.readAheadBytes = ahead
    this.options = options
    this.store = storeOf({ url, store }, 'createStreamSegmentReadStream')
    destroyOnAbort(this, signal, `read of ${this.store.url}`)
  }

  /** Requests and bytes by kind, cache hits; `inode` counts the open. */
  get timing(): ReadTiming | undefined {
    const t = this.reader?.timing
    return t === undefined ? undefined : withOpen(t, this.openRequests)
  }

  override _open(cb: Callback): void {
    this.untilStopped(this.openFile(), cb)
  }

  override _read(cb: Callback): void {
    this.untilStopped(this.next(), cb)
  }

  /**
   * Calls `cb` once, when `work` settles or the stream is stopped, whichever comes first
   * (see `stopping`); what `work` does after a stop is let go (its pieces given back).
   */
  private untilStopped(work: Promise<void>, cb: Callback): void {
    unlessAborted(work, this.stopping.signal).then(
      () => cb(null),
      (err) => cb(this.failure(err)),
    )
  }

  /**
   * What failed, as an Error: a store outside the contract may reject with anything, and
   * a rejection with `undefined` would read as success (streamx takes a falsy error for
   * none, and `fillError` would not hold it): the stream would end early, as if complete.
   */
  private failure(err: unknown): Error {
    return asError(err, () => `read of ${this.store.url}`)
  }

  override _predestroy(): void {
    this.abortFile()
  }

  override _destroy(cb: Callback): void {
    this.abortFile()
    // The summaries its reader cached go (up to readSummaryCacheBytes); its timing stays.
    this.reader?.clear()
    const file = this.file
    if (file === undefined) {
      cb(null)
      return
    }
    file.close().then(
      () => cb(null),
      () => cb(null), // an aborted file refuses close; its memory goes with it
    )
  }

  private abortFile(): void {
    const state = (this as unknown as { _readableState?: { error: unknown } | null })._readableState
    const err = state?.error ?? StreamSegmentError.aborted(`read of ${this.store.url} aborted`)
    this.stopping.abort(err) // the open's requests, if it is still going on, and a `_read` waiting
    // Ended before its range's end (a failure, destroy(), the signal): whatever is in
    // flight (GETs queued ahead, a plan, the walk made beside the first window) is cut.
    if (!this.ended) this.file?.abort(err)
    // The pieces fetched ahead and not pushed go back to be read into again (a GET still in
    // flight gives its own when it comes): left to the collector, every stream ended early
    // would take its read-ahead out of the pool (util/piece-pool.ts says why that costs).
    for (const a of this.queue) if (typeof a.bytes !== 'function') a.bytes.then(giveBack, () => undefined)
    if (this.handing !== undefined) givePieces(this.handing.views.slice(this.handing.at))
    this.queue = []
    this.handing = undefined
  }

  private async openFile(): Promise<void> {
    const { cno, start = 0, end } = this.options
    const counted = countingStore(this.store, this.openRequests, this.stopping.signal)
    // An open that finishes once the stream is stopped (its requests did not hear the
    // abort: a custom store's) gives a handle nobody would close: closed as it comes.
    const file = await unlessAborted(
      SegmentFile.open(counted.store, { cno, readOnly: true }),
      this.stopping.signal,
      (late) => late.close().catch(() => undefined),
    )
    counted.stop()
    this.file = file
    this.size = file.size
    this.reader = new Reader(fileState(file), this.options)
    this.pos = Math.min(start, file.size)
    this.end = Math.min(end === undefined ? file.size : end + 1, file.size)
  }

  private async next(): Promise<void> {
    // A GET being handed over gives its next chunk first, whatever comes after it.
    if (this.handing !== undefined) {
      this.handNext(this.handing)
      return
    }
    // A window that failed to plan left a gap after the pieces queued: nothing more is pushed.
    if (this.fillError !== undefined) throw this.fillError
    // The first piece queued is pushed as soon as it is there: the fill goes on behind it
    // (planning and starting the GETs of the rest of the read-ahead).
    while (this.queue.length === 0) {
      if (this.fillError !== undefined) throw this.fillError
      const filling = this.fill()
      await Promise.race([filling, new Promise<void>((resolve) => (this.wake = resolve))])
      this.wake = undefined
      if (this.queue.length === 0 && this.filling === undefined) {
        if (this.fillError !== undefined) throw this.fillError
        if (this.pos >= this.end && this.planned.length === 0) {
          this.ended = true
          this.push(null)
          return
        }
      }
    }
    const head = this.queue.shift() as Ahead
    const bytes = typeof head.bytes === 'function' ? head.bytes() : await head.bytes
    if (this.stopping.signal.aborted) {
      giveBack(bytes) // came after the stream was stopped (see untilStopped)
      return
    }
    this.ahead -= head.size
    if (bytes instanceof Uint8Array) {
      this.bytesRead += bytes.byteLength
      this.push(bytes)
    } else if (bytes.length > 0) {
      this.handNext({ views: bytes, at: 0 })
    }
    // Keep the window full while the consumer works.
    this.fill().catch((err) => {
      this.fillError ??= this.failure(err)
    })
  }

  /**
   * Pushes the next chunk of a GET's views (handOverNext): one chunk per `_read`, so the
   * copies made ahead of the consumer stay within the stream's `highWaterMark`, not a whole
   * GET of them (up to `readGetMaxBytes`, 16 MiB), and each piece goes back to be read into
   * again as soon as it is copied (util/piece-pool.ts says why).
   */
  private handNext(h: Handing): void {
    const { chunk, end } = handOverNext(h.views, h.at)
    givePieces(h.views.slice(h.at, end))
    h.at = end
    this.handing = end < h.views.length ? h : undefined
    this.bytesRead += chunk.byteLength
    this.push(chunk)
  }

  /** Wakes next() waiting for the first queued piece. */
  private wake: (() => void) | undefined

  private enqueue(a: Ahead): void {
    if (this.stopping.signal.aborted) {
      // Stopped (abortFile emptied the queue): nothing takes it now. What a GET brings goes
      // back, as a store that heard no abort still answers.
      if (typeof a.bytes !== 'function') a.bytes.then(giveBack, () => undefined)
      return
    }
    this.queue.push(a)
    this.ahead += a.size
    this.wake?.()
  }

  /** Starts fetches until `readAheadBytes` are ahead (and at least one piece is queued). */
  private fill(): Promise<void> {
    this.filling ??= this.doFill().finally(() => {
      this.filling = undefined
    })
    return this.filling
  }

  private async doFill(): Promise<void> {
    while (this.queue.length === 0 || this.ahead < this.readAheadBytes) {
      if (this.stopping.signal.aborted) return // no GET is started for a stream that stopped
      // Never plan past a window that failed: its range would be skipped.
      if (this.fillError !== undefined) throw this.fillError
      if (this.planned.length === 0) {
        if (this.pos >= this.end && this.planning === undefined) return
        await this.planNext()
        continue
      }
      const p = this.planned.shift() as Piece
      this.plannedBytes -= p.end - p.start
      if (p.kind === 'data') {
        const bytes = (this.reader as Reader).fetchPiece(p)
        bytes.catch(() => undefined) // awaited in order by next(); never unhandled
        this.enqueue({ size: p.end - p.start, bytes })
      } else if (p.kind === 'memory') {
        const b = p.bytes
        this.enqueue({ size: b.byteLength, bytes: () => b })
      } else {
        for (let at = p.start; at < p.end; at += ZERO_CHUNK) {
          const n = Math.min(ZERO_CHUNK, p.end - at)
          this.enqueue({ size: n, bytes: () => Buffer.alloc(n) })
        }
      }
    }
    // Walk the next window while the GETs of this one run, so no GET waits for a walk.
    if (this.plannedBytes < this.window() && this.pos < this.end && this.planning === undefined) {
      this.planNext().catch((err) => {
        this.fillError ??= this.failure(err)
      })
    }
  }

  private window(): number {
    const bs = (this.file as SegmentFile).settings.dataBlockSize
    return Math.max(this.readAheadBytes, (this.reader as Reader).options.readGetMaxBytes, bs)
  }

  /** Plans the next window (one at a time, in order), or waits for the one in progress. */
  private planNext(): Promise<void> {
    this.planning ??= (async () => {
      const bs = (this.file as SegmentFile).settings.dataBlockSize
      const from = this.pos
      // The first window is one small GET: its walk fetches only the nodes on the way to
      // the first leaf, and its answer comes before the GETs of the next window share the
      // link with it, so the first byte comes after one index read and one short GET. The
      // second window is walked beside it: its leaves are read in the same round trip as
      // the first's, so its GETs start as soon as the first window is planned, not one
      // round trip later. It is one GET short of the read-ahead, so that its leaves (one
      // read per object of at least a GET's size) and the first's fit the walk's slots
      // at once. The windows after it, the whole read-ahead, are walked while the GETs of
      // the one before run.
      const full = this.window()
      const reader = this.reader as Reader
      const firstWindow = this.nextWindow === 0
      const size = firstWindow ? Math.min(full, FIRST_WINDOW_BYTES) : this.nextWindow
      const getMax = reader.options.readGetMaxBytes
      this.nextWindow = firstWindow ? Math.max(getMax, full - getMax, bs) : full
      const to = Math.min(this.end, (Math.floor(from / bs) + Math.max(1, Math.ceil(size / bs))) * bs)
      this.pos = to
      // The second window's plan starts from the walk made beside the first, and fails as it did.
      const beside = this.walkBeside
      this.walkBeside = undefined
      if (beside !== undefined) await beside
      // Its data GET starts with its leaf's read, on a guess of where the data lies (Reader.plan).
      const planning = reader.plan(from, to, firstWindow)
      if (firstWindow && to < this.end) {
        const aheadTo = Math.min(this.end, to + this.nextWindow)
        this.walkBeside = reader.walk(to / bs, Math.ceil(aheadTo / bs), true)
        this.walkBeside.catch(() => undefined) // awaited by the second window's plan
      }
      const pieces = await planning
      // A run cut short by the window's end is planned again with the next window, so the
      // windows cost no more GETs than one plan of the whole range.
      const last = pieces[pieces.length - 1]
      if (
        to < this.end &&
        pieces.length > 1 &&
        last?.kind === 'data' &&
        last.end === to &&
        last.run.count * bs < reader.options.readGetMaxBytes
      ) {
        pieces.pop()
        this.pos = last.start
        reader.timing.storedBlocks -= last.run.count // counted again with the next window
      }
      for (const p of pieces) {
        this.planned.push(p)
        this.plannedBytes += p.end - p.start
      }
    })()
      .catch((err) => {
        // Recorded before anyone can plan on: `pos` is already past this window.
        const e = this.failure(err)
        this.fillError ??= e
        throw e
      })
      .finally(() => {
        this.planning = undefined
      })
    return this.planning
  }
}

/** Gives back the pieces under a GET's answer that the consumer never got. */
function giveBack(bytes: Uint8Array | Uint8Array[]): void {
  givePieces(Array.isArray(bytes) ? bytes : [bytes])
}

/**
 * The next chunk the consumer gets of a GET's views, from view `i` (< views.length), and
 * the index after the views it holds: a run of whole lent pieces copied into a buffer of at
 * most HANDOVER_BYTES, of the consumer's own; any other view as it is (it is never given
 * back, so it is the consumer's already).
 */
export function handOverNext(views: readonly Uint8Array[], i: number): { chunk: Uint8Array; end: number } {
  const first = views[i] as Uint8Array
  if (!isLentPiece(first)) return { chunk: first, end: i + 1 }
  let bytes = first.byteLength
  let end = i + 1
  for (; end < views.length; end++) {
    const v = views[end] as Uint8Array
    if (!isLentPiece(v) || bytes + v.byteLength > HANDOVER_BYTES) break
    bytes += v.byteLength
  }
  const chunk = Buffer.allocUnsafe(bytes)
  for (let at = 0, k = i; k < end; k++) {
    const v = views[k] as Uint8Array
    chunk.set(v, at)
    at += v.byteLength
  }
  return { chunk, end }
}

export function createStreamSegmentReadStream(options: ReadStreamOptions): StreamSegmentReadStream {
  return new StreamSegmentReadStream(options)
}
