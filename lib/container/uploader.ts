/**
 * Sends segment objects to the store, create-only: every PutObject and every multipart
 * lifecycle of a file (flush objects, partial segments, objects sent ahead) goes through
 * one Uploader.
 *
 * - An object no larger than one piece (`segmentMpuChunkSize`) goes in one PutObject
 *   with `If-None-Match: *`; a larger one as a multipart upload (`MultipartObject`) whose
 *   key is claimed first (see ObjectStore.createMultipart), in pieces of exactly
 *   `segmentMpuChunkSize` bytes but the last, several at once.
 * - At most `segmentMpuMaxConcurrency` requests carrying bodies are in flight across
 *   every object of the file (one shared Limiter). Bodies are views of the dirty tier's
 *   slabs, pinned until their request ends (`Body.done`): the upload copies nothing and
 *   holds no memory of its own.
 * - A multipart upload that fails, or is given up, is aborted (best effort, logged)
 *   after its pieces in flight have settled, its claim released with it (`releaseClaim`:
 *   the empty placeholder deleted, so that `ls` lists no abandoned attempt for it); nothing
 *   of it becomes visible. The error is
 *   the store's, unchanged, but for a rejection that is no Error (a custom store's
 *   `undefined`, a string): ERR_STORE naming the request (`requestError`), the value its
 *   cause. Taken as it is, it would be no failure to the checks below (`failure ===
 *   undefined`) nor to the writer's, which sends a store failure's blocks again and takes
 *   anything else for a bug of its own. Converted where the failure is caught anyway: a
 *   hop more would let more pieces start before the failure is seen.
 * - The same lifecycle makes plain objects (exports): no claim, the caller's metadata and
 *   attributes, parts of uneven sizes, and parts copied server-side from a range of
 *   another object (`startCopy`, within the same request slots) beside parts sent.
 * - Resume (`resumer`, set by uploadFile): each new segment object's upload records, as
 *   metadata on its claim, what a later attempt checks (`Resumer.metadata`); and an object
 *   that starts where an interrupted attempt's open upload started continues that upload
 *   (`openSegment`): a part it already holds is not sent again when its size and MD5 are
 *   those of the bytes this object puts there, read from the source now; any other part
 *   is uploaded again over it. A new object laid out as an object the interrupted attempt
 *   completed copies from it, server-side, each piece whose blocks all have the CRC-32s
 *   of that object's live slots (`copyFrom`), and keeps the copy only when its MD5 (the
 *   copy's answer) is that of the bytes read from the source now; otherwise the piece is
 *   uploaded over it. See container/resume.ts for the reasoning.
 */
import debug from 'debug'
import { StreamSegmentError, throwIfAborted } from '../errors.js'
import { segmentKey } from '../format/names.js'
import { MAX_PIECES } from '../settings.js'
import type {
  CompletedPart,
  CopySource,
  CreateMultipartOptions,
  ObjectStore,
  PutOptions,
  Body as StoreBody,
  UploadedPart,
} from '../store/types.js'
import { crc32 } from '../util/crc32.js'
import { digestChunks } from '../util/digest.js'
import { Limiter } from '../util/limiter.js'
import { printableLog } from '../util/shell-words.js'
import { signalWithin } from '../util/signals.js'
import { asError } from '../util/typed-arrays.js'

const log = printableLog(debug('stream-segment:upload'))

/** How long giving up a multipart upload may take (best effort: gc aborts what is left open). */
const MPU_ABORT_MS = 10_000

/** Bytes handed to a request: views to send, and what to call when the request ends. */
export interface Body {
  chunks: Uint8Array[]
  done: () => void
}

/** An object ready to send: its key, size, and its bytes [start, end) on demand. */
export interface Uploadable {
  readonly key: string
  readonly size: number
  take(start: number, end: number): Promise<Body>
}

/** An interrupted attempt's open upload of a segment object, found by a resume. */
export interface Leftover {
  key: string
  cno: number
  part: number
  uploadId: string
  /** The parts it holds, as the store listed them. */
  parts: readonly UploadedPart[]
}

/**
 * An object an interrupted attempt completed (never published), found by a resume: its
 * data's block CRC-32s (its summary), so that a new object laid out the same way can copy
 * the pieces whose every block matches instead of sending them.
 */
export interface CompletedLeftover {
  key: string
  etag: string
  blockSize: number
  /** Its data slots' CRC-32s and whether each is live, in slot order. */
  crc: Uint32Array
  live: Uint8Array
}

/** What makes a file's segment objects resumable (see container/resume.ts). */
export interface Resumer {
  /** Metadata recorded on the claim of a new object whose data starts at byte `first` of the file. */
  metadata(first: number): Record<string, string>
  /**
   * What an interrupted attempt left of an object whose data started at byte `first`
   * (each one given once): its open upload to continue, or a completed object to copy from.
   */
  take(first: number): Leftover | CompletedLeftover | undefined
  /** An upload `take` gave has completed, as the object `etag` names: it is in the checkpoint. */
  completed(key: string, etag: string): void
}

/** A segment object's upload as `openSegment` starts it: fresh, or an interrupted one continued. */
export interface SegmentUpload {
  cno: number
  part: number
  key: string
  upload: MultipartObject
  continued: boolean
}

export interface UploadResult {
  key: string
  bytes: number
  requests: number
}

export class Uploader {
  /** Requests carrying bodies, across every object of the file. */
  readonly slots: Limiter
  /** Body bytes of every request that completed (PutObject and UploadPart), for progress. */
  uploadedBytes = 0
  /** Bytes of every part copied server-side that completed (UploadPartCopy). */
  copiedBytes = 0
  /** Bytes of parts an interrupted upload held and that were taken instead of being sent (resume). */
  reusedBytes = 0
  /** Requests that completed. */
  requests = 0
  /** Set when a part copy came back without the MD5 of the file's bytes: no more copies are made. */
  copiesUnchecked = false
  /** Set by uploadFile: records what a later resume checks, and continues interrupted uploads. */
  resumer: Resumer | undefined
  /** Called when a request carrying a body or copying a part has completed (progress). */
  onRequestDone: (() => void) | undefined

  constructor(
    readonly store: ObjectStore,
    readonly pieceSize: number,
    concurrency: number,
  ) {
    this.slots = new Limiter(concurrency)
  }

  /**
   * Waits for room, takes the bytes with `take` and starts the request `send` makes of
   * them; resolves once the request is under way, with a promise of its end. The slot
   * and the body are given back when it ends.
   */
  async start<T>(
    take: () => Promise<Body>,
    send: (chunks: Uint8Array[]) => Promise<T>,
    reused?: (result: T) => boolean,
  ): Promise<{ done: Promise<T> }> {
    await this.slots.acquire()
    let body: Body
    try {
      body = await take()
    } catch (err) {
      this.slots.release()
      throw err
    }
    const done = send(body.chunks)
      .then((result) => {
        if (reused?.(result) === true) this.reusedBytes += byteLength(body.chunks)
        else {
          this.uploadedBytes += byteLength(body.chunks)
          this.requests++
        }
        this.onRequestDone?.()
        return result
      })
      .finally(() => {
        body.done()
        this.slots.release()
      })
    return { done }
  }

  /**
   * Starts the whole object's create-only PutObject (waiting for room only). `commitSignal`
   * (see `upload`), when given, is the request's own; `signal` still keeps it from starting.
   */
  startPut(obj: Uploadable, signal?: AbortSignal, commitSignal?: AbortSignal): Promise<{ done: Promise<void> }> {
    return this.start(
      () => obj.take(0, obj.size),
      async (chunks) => {
        if (commitSignal !== undefined) throwIfAborted(signal, `put ${obj.key}`)
        try {
          await this.store.put(obj.key, chunks, { ifNoneMatch: '*', signal: commitSignal ?? signal })
        } catch (err) {
          throw requestError(err, 'put', this.store, obj.key)
        }
        log('put %s %d bytes', obj.key, obj.size)
      },
    )
  }

  /**
   * Starts a multipart upload to fill piece by piece: by default claiming `key`
   * create-only; `options` without `ifNoneMatch` make a plain object, replaced at completion.
   */
  openMultipart(
    key: string,
    signal?: AbortSignal,
    options: Omit<CreateMultipartOptions, 'signal'> = { ifNoneMatch: '*' },
    createSignal?: AbortSignal,
  ): MultipartObject {
    return new MultipartObject(this, key, signal, options, undefined, createSignal)
  }

  /**
   * Starts the multipart upload of a segment object whose data starts at byte `first` of
   * the file (undefined: not at a place a resume can match): an interrupted upload of
   * the object that started there, continued, when the resumer has one; otherwise a new
   * claim under `fresh()`'s number, recording the resumer's metadata.
   */
  openSegment(
    first: number | undefined,
    fresh: () => { cno: number; part: number },
    signal?: AbortSignal,
  ): SegmentUpload {
    const found = first === undefined ? undefined : this.resumer?.take(first)
    // The checkpoint's number now (a part number taken, and left unused when continuing:
    // harmless). An upload is continued only under a lower number, so that no node of this
    // checkpoint points into an object of a higher one (the node checks refuse that).
    const { cno, part } = fresh()
    const left = found !== undefined && 'uploadId' in found && found.cno < cno ? found : undefined
    const copyFrom = found !== undefined && !('uploadId' in found) ? found : undefined
    if (left !== undefined) {
      log('continue %s (upload %s, %d parts there)', left.key, left.uploadId, left.parts.length)
      const upload = new MultipartObject(this, left.key, signal, {}, left)
      upload.resumable = true
      return { cno: left.cno, part: left.part, key: left.key, upload, continued: true }
    }
    const key = segmentKey(cno, part)
    const metadata = first === undefined ? undefined : this.resumer?.metadata(first)
    const upload = this.openMultipart(key, signal, metadata === undefined ? undefined : { ifNoneMatch: '*', metadata })
    upload.resumable = metadata !== undefined
    if (copyFrom !== undefined && this.store.uploadPartCopy !== undefined && this.canCopyFrom(this.store)) {
      log('%s: pieces matching %s are copied from it', key, copyFrom.key)
      upload.copyFrom = copyFrom
    }
    return { cno, part, key, upload, continued: false }
  }

  /** Whether parts of this store's uploads can be copied server-side from objects of `source`. */
  canCopyFrom(source: ObjectStore): boolean {
    return this.store.uploadPartCopy !== undefined && this.store.canCopyFrom?.(source) === true
  }

  /** One PutObject of `body` as `options` say (waiting for room); resolves with its ETag. */
  async putObject(key: string, body: StoreBody, options: PutOptions = {}): Promise<{ etag: string }> {
    return this.slots.run(async () => {
      let out: { etag: string }
      try {
        out = await this.store.put(key, body, options)
      } catch (err) {
        throw requestError(err, 'put', this.store, key)
      }
      this.uploadedBytes += body instanceof Uint8Array ? body.byteLength : byteLength(body)
      this.requests++
      this.onRequestDone?.()
      log('put %s', key)
      return out
    })
  }

  /**
   * Uploads `obj` create-only and waits for it: one PutObject, or a multipart upload.
   * `commitSignal`: the signal of the request that makes the object visible (the PutObject,
   * or the completion), instead of `signal`, which still cuts every other request and
   * keeps that one from starting: a caller that must know whether the object landed after
   * an abort (a part 0) waits for its answer this way.
   */
  async upload(obj: Uploadable, signal?: AbortSignal, commitSignal?: AbortSignal): Promise<UploadResult> {
    const { key, size } = obj
    if (size <= this.pieceSize) {
      await (await this.startPut(obj, signal, commitSignal)).done
      return { key, bytes: size, requests: 1 }
    }
    const pieces = Math.ceil(size / this.pieceSize)
    if (pieces > MAX_PIECES) {
      throw StreamSegmentError.invalidArgument(`${key}: ${size} bytes need ${pieces} pieces, over ${MAX_PIECES}`)
    }
    const mpu = this.openMultipart(key, signal)
    try {
      for (let start = 0; start < size && mpu.failure === undefined; start += this.pieceSize) {
        const end = Math.min(start + this.pieceSize, size)
        // A piece that got room after another failed is not sent: the upload is lost anyway.
        await mpu.startPart(() => (mpu.failure === undefined ? obj.take(start, end) : Promise.reject(mpu.failure)))
      }
      await mpu.complete(commitSignal)
      return { key, bytes: size, requests: pieces + 2 }
    } catch (err) {
      await mpu.abort()
      throw mpu.failure ?? err
    }
  }
}

/**
 * One multipart upload, from its claim to its completion or abort. Pieces are numbered
 * in the order they are started; a piece that fails is kept as the upload's failure and
 * makes `complete` reject.
 */
export class MultipartObject {
  private readonly uploadId: Promise<string>
  private readonly parts: Array<Promise<CompletedPart>> = []
  private failed: { err: unknown; partNumber?: number } | undefined
  /** Parts an interrupted upload continued here holds, by number, until a piece takes or replaces each. */
  private readonly held = new Map<number, UploadedPart>()
  private readonly continued: boolean
  /** Opened by `openSegment` for a resumable file: a resume can find and continue it. */
  resumable = false
  /** A completed object of an interrupted attempt laid out as this one: pieces matching it are copied. */
  copyFrom: CompletedLeftover | undefined

  constructor(
    private readonly uploader: Uploader,
    readonly key: string,
    private readonly signal?: AbortSignal,
    options: Omit<CreateMultipartOptions, 'signal'> = { ifNoneMatch: '*' },
    continued?: Leftover,
    /** The creation's own signal, instead of `signal`: a caller that must abort what it made waits for its answer. */
    createSignal?: AbortSignal,
  ) {
    this.continued = continued !== undefined
    if (continued !== undefined) {
      this.uploadId = Promise.resolve(continued.uploadId)
      for (const p of continued.parts) this.held.set(p.partNumber, p)
    } else {
      // Pieces are all pieceSize bytes but the last (a copied range's upload excepted): a store
      // may write them in place (the directory store's completion then copies nothing).
      const partBytes = options.unevenParts === true ? undefined : uploader.pieceSize
      this.uploadId = uploader.store.createMultipart(key, { partBytes, ...options, signal: createSignal ?? signal })
    }
    this.uploadId.catch((err) => this.fail(err, undefined, 'createMultipart')) // judged when the object completes
  }

  /** Pieces started so far. */
  get pieces(): number {
    return this.parts.length
  }

  /** The first failure of the claim or of a piece, if any. */
  get failure(): unknown {
    return this.failed?.err
  }

  /** The number of the piece whose failure is `failure` (undefined: none, or the claim's). */
  get failedPart(): number | undefined {
    return this.failed?.partNumber
  }

  /** Keeps the first failure; returns `thrown` as an Error (requestError: of `op`). */
  private fail(thrown: unknown, partNumber?: number, op = 'multipart upload'): Error {
    const err = requestError(thrown, op, this.uploader.store, this.key)
    this.failed ??= { err, partNumber }
    return err
  }

  /** Takes the next part number; `settle` hands it the request's outcome, judged at completion. */
  private reservePart(): { partNumber: number; settle: (p: Promise<CompletedPart>) => void } {
    const partNumber = this.parts.length + 1
    let settle!: (p: Promise<CompletedPart>) => void
    const part = new Promise<CompletedPart>((resolve) => {
      settle = resolve as (p: Promise<CompletedPart>) => void
    })
    part.catch(() => undefined)
    this.parts.push(part)
    return { partNumber, settle }
  }

  /** Waits for room, takes the next piece's bytes with `take` and starts its UploadPart. */
  async startPart(take: () => Promise<Body>): Promise<void> {
    // Reserve the number before waiting, so pieces started together keep their order.
    const { partNumber, settle } = this.reservePart()
    const held = this.held.get(partNumber)
    this.held.delete(partNumber)
    let reused = false
    try {
      const { done } = await this.uploader.start(
        take,
        async (chunks) => {
          let op = 'createMultipart' // the request awaited, named in a failure that is no Error
          try {
            if (held !== undefined && sameBytes(held, chunks)) {
              reused = true
              log('part %s #%d: held already, the same %d bytes', this.key, partNumber, held.size)
              return { partNumber, etag: held.etag }
            }
            const id = await this.uploadId
            const copy =
              this.copyFrom === undefined || this.uploader.copiesUnchecked
                ? undefined
                : copyRange(this.copyFrom, (partNumber - 1) * this.uploader.pieceSize, chunks)
            if (copy !== undefined && this.uploader.store.uploadPartCopy !== undefined) {
              const source = { store: this.uploader.store, key: copy.key, range: copy.range, ifMatch: copy.etag }
              op = 'uploadPartCopy'
              const { etag, md5 } = await this.uploader.store.uploadPartCopy(this.key, id, partNumber, source, {
                signal: this.signal,
              })
              this.uploader.requests++
              const where = `${copy.key} [${copy.range.start}, ${copy.range.end})`
              // The summary's CRCs vouch for the file's blocks, not for the bytes stored
              // under them: the part copied is kept only when its MD5 is that of the file's.
              if (md5 !== undefined && md5 === digestChunks('md5', chunks, 'hex')) {
                reused = true
                log('part %s #%d: copied from %s', this.key, partNumber, where)
                return { partNumber, etag }
              }
              // No MD5, or not the bytes (SSE-KMS ETags look like MD5s and never match; a damaged
              // leftover): no more copies are made, each would cost a request for nothing.
              this.uploader.copiesUnchecked = true
              log(
                "part %s #%d: copied from %s, but not the file's bytes (MD5 %s): sent over it",
                this.key,
                partNumber,
                where,
                md5,
              )
            }
            op = 'uploadPart'
            const { etag } = await this.uploader.store.uploadPart(this.key, id, partNumber, chunks, {
              signal: this.signal,
            })
            log('part %s #%d', this.key, partNumber)
            return { partNumber, etag }
          } catch (err) {
            throw this.fail(err, partNumber, op) // at once: a piece waiting for room must see it
          }
        },
        () => reused,
      )
      done.catch((err) => this.fail(err, partNumber))
      settle(done)
    } catch (thrown) {
      const err = this.fail(thrown, partNumber)
      settle(Promise.reject(err))
      throw err
    }
  }

  /**
   * Waits for room and starts the next piece as a server-side copy of `source`'s range
   * (see ObjectStore.uploadPartCopy); a failure is the upload's, as a sent piece's.
   */
  async startCopy(source: CopySource): Promise<void> {
    const { store } = this.uploader
    if (store.uploadPartCopy === undefined) {
      throw StreamSegmentError.unsupported(`${store.url}: copies no parts server-side`)
    }
    const copy = store.uploadPartCopy.bind(store)
    const bytes = source.range.end - source.range.start
    const { partNumber, settle } = this.reservePart()
    try {
      await this.uploader.slots.acquire()
    } catch (thrown) {
      const err = this.fail(thrown, partNumber)
      settle(Promise.reject(err))
      throw err
    }
    const done = (async () => {
      let op = 'createMultipart' // as in startPart
      try {
        if (this.failed !== undefined) throw this.failed.err
        const id = await this.uploadId
        op = 'uploadPartCopy'
        const { etag } = await copy(this.key, id, partNumber, source, { signal: this.signal })
        this.uploader.copiedBytes += bytes
        this.uploader.requests++
        this.uploader.onRequestDone?.()
        log('copy part %s #%d from %s [%d, %d)', this.key, partNumber, source.key, source.range.start, source.range.end)
        return { partNumber, etag }
      } catch (err) {
        throw this.fail(err, partNumber, op)
      } finally {
        this.uploader.slots.release()
      }
    })()
    done.catch(() => undefined)
    settle(done)
  }

  /** Waits for every piece started, whatever its outcome. */
  async settled(): Promise<void> {
    await Promise.allSettled(this.parts)
  }

  /**
   * Waits for every piece and completes the upload; rejects with the first failure.
   * `commitSignal`: the completion's own signal (see Uploader.upload), instead of the upload's.
   */
  async complete(commitSignal?: AbortSignal): Promise<{ etag: string }> {
    const parts = await Promise.all(this.parts)
    if (this.failed !== undefined) throw this.failed.err
    const id = await this.uploadId
    if (commitSignal !== undefined) throwIfAborted(this.signal, `complete multipart ${this.key}`)
    let out: { etag: string }
    try {
      out = await this.uploader.store.completeMultipart(this.key, id, parts, { signal: commitSignal ?? this.signal })
    } catch (err) {
      throw requestError(err, 'completeMultipart', this.uploader.store, this.key)
    }
    this.uploader.requests++
    if (this.continued) this.uploader.resumer?.completed(this.key, out.etag)
    log('complete %s in %d pieces', this.key, parts.length)
    return out
  }

  /**
   * Gives the upload up: waits for its pieces in flight, then aborts it (best effort,
   * logged). When the caller's signal gave it up and a resume can find it (`resumable`),
   * it is left open instead, for the next attempt to continue (or gc to abort). The abort
   * request ends within MPU_ABORT_MS, or at once when the caller's signal fires while it
   * runs: a flush, rollback or close that waits for it never waits on a store that does
   * not answer. Resolves with the upload left open when the abort failed (gc aborts a
   * container's; an export's target is outside any container, so it says so).
   */
  async abort(): Promise<{ uploadId: string; err: unknown } | undefined> {
    await this.settled()
    if (this.signal?.aborted === true && this.resumable) {
      log('keep %s open for a resume', this.key)
      return undefined
    }
    let id: string
    try {
      id = await this.uploadId
    } catch {
      return undefined // never created: nothing to abort
    }
    const within = signalWithin(this.signal, MPU_ABORT_MS, () => new Error(`no answer within ${MPU_ABORT_MS} ms`))
    try {
      await this.uploader.store.abortMultipart(this.key, id, { signal: within.signal, releaseClaim: true })
      return undefined
    } catch (thrown) {
      const e = requestError(thrown, 'abortMultipart', this.uploader.store, this.key)
      log('abort %s %s failed: %s', this.key, id, e)
      return { uploadId: id, err: e }
    } finally {
      within.done()
    }
  }
}

/**
 * A request's failure as an Error: one that is none (a custom store's) is ERR_STORE saying
 * that `op` of the key (of the container, for '': a listing) failed with it, the value its
 * cause (see the top).
 */
export function requestError(thrown: unknown, op: string, store: ObjectStore, key: string): Error {
  return asError(thrown, () => `${op} of ${key === '' ? store.url : `${store.url}/${key}`}`)
}

/**
 * Whether a part an upload holds is exactly `chunks`: the same size and the same MD5.
 * A store that gives no MD5 of the part (`md5` absent) never matches: nothing is taken
 * that was not checked against the bytes.
 */
function sameBytes(part: UploadedPart, chunks: readonly Uint8Array[]): boolean {
  if (part.md5 === undefined || part.size !== byteLength(chunks)) return false
  return digestChunks('md5', chunks, 'hex') === part.md5
}

/**
 * The range of `from` to copy instead of sending `chunks`, the part starting at byte
 * `start` of this object: the same bytes of an object laid out as this one, when every
 * block of them is a live data slot of `from` with the CRC-32 of the block here.
 */
function copyRange(
  from: CompletedLeftover,
  start: number,
  chunks: readonly Uint8Array[],
): { key: string; etag: string; range: { start: number; end: number } } | undefined {
  const bs = from.blockSize
  const bytes = byteLength(chunks)
  if (bytes === 0 || bytes % bs !== 0 || start % bs !== 0) return undefined
  const first = start / bs
  const count = bytes / bs
  if (first + count > from.crc.length) return undefined
  for (let i = 0; i < count; i++) if (from.live[first + i] !== 1) return undefined
  const block = Buffer.allocUnsafe(bs)
  let slot = first
  let filled = 0
  for (const c of chunks) {
    for (let at = 0; at < c.byteLength; ) {
      if (filled === 0 && c.byteLength - at >= bs) {
        if (crc32(c.subarray(at, at + bs)) !== from.crc[slot]) return undefined
        slot++
        at += bs
        continue
      }
      const n = Math.min(bs - filled, c.byteLength - at)
      block.set(c.subarray(at, at + n), filled)
      filled += n
      at += n
      if (filled === bs) {
        if (crc32(block) !== from.crc[slot]) return undefined
        slot++
        filled = 0
      }
    }
  }
  return { key: from.key, etag: from.etag, range: { start, end: start + bytes } }
}

function byteLength(chunks: readonly Uint8Array[]): number {
  let n = 0
  for (const c of chunks) n += c.byteLength
  return n
}
