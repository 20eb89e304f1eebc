/**
 * `createStreamSegmentWriteStream`: a Node Writable that writes what is piped into it as
 * a new checkpoint of a container, from offset 0 (an existing container gets a new
 * checkpoint that replaces its content).
 *
 * A thin adapter over SegmentFile: `_write`/`_writev` await the file's write (`intake`,
 * the one call into it), which holds the callback back while partial segments are
 * written, so a fast source is paused and memory stays within the dirty limit (plus what
 * the stream itself buffers: `highWaterMark`, small by default). `_final` runs the flush;
 * 'finish' therefore means committed: every object and the inode are written, and
 * `flushTiming` holds the FlushTiming (also emitted as 'flush', just before 'finish').
 * 'close' follows 'finish', or the error. A source error, a store error, `destroy()`
 * (with or without an error) or the AbortSignal aborts every request in flight and
 * publishes nothing, but for the inode write, the commit point, whose answer a stop that
 * meets it waits for (`abortBy`, `_destroy`); 'progress' is emitted after each upload
 * request completes.
 *
 * Why node:stream and not streamx (which the read stream uses): the contract here is
 * Node's Writable, whole — `write(chunk, encoding, cb)` calling `cb`, strings with an
 * encoding, `cork()`/`uncork()`, `writableFinished`, `writableNeedDrain`, `errored`,
 * 'close' after 'finish' — and streamx has none of these (its `write` ignores `cb`, it
 * takes no strings, has no cork, and runs `_destroy` after a clean end). Node's Writable
 * batches what is queued into one `_writev` as streamx does, so it costs nothing in
 * speed (test/bench/stream-flush.ts).
 *
 * With `wal`, the whole stream is one atomic group in the log (SegmentFile.walBegin): each
 * chunk is in the log before its callback, the commit is logged when the stream ends, then
 * the flush publishes. A process that dies after the end and before the commit point is
 * published leaves a log that the next writer with the folder replays and publishes; one
 * that dies mid-stream leaves a group never committed, which is dropped: a stream is
 * published whole or not at all, as without a log. A stream destroyed or aborted in a
 * process that lives on empties its log as it closes (a flush that failed by itself keeps
 * it, as a process that died would).
 */
import { Writable } from 'node:stream'
import { hasInode } from '../container/inode.js'
import { requestError } from '../container/uploader.js'
import { StreamSegmentError } from '../errors.js'
import { INODE_KEY } from '../format/names.js'
import { fileState, OPEN_SIGNAL, SegmentFile } from '../segment-file.js'
import {
  checkOptionNames,
  checkSettingValues,
  hooksOf,
  PART_BYTES,
  type Settings,
  STREAMING_PROFILE,
  TEST_HOOKS,
  type WithHooks,
} from '../settings.js'
import type { ObjectStore } from '../store/types.js'
import { showValue } from '../util/typed-arrays.js'
import { checkWalOptions, type WalOptions } from '../wal/wal.js'
import { type FlushTiming, isUnknownOutcome } from '../write/flush.js'
import { checkStreamOptions, countingStore, destroyOnAbort, type StreamLocation, storeOf } from './options.js'

/** The write stream's own options (beside the settings). */
const WRITE_STREAM_OPTIONS = ['url', 'store', 'signal', 'highWaterMark', 'profile', 'adoptChunks', 'wal']

export interface WriteStreamOptions extends Partial<Settings>, StreamLocation {
  signal?: AbortSignal
  /** Bytes the stream itself may queue before `write` returns false (default 64 KiB). */
  highWaterMark?: number
  /**
   * Defaults for the settings not given: 'streaming' (the default: STREAMING_PROFILE,
   * data sent ahead within a 96 MiB dirty limit) or 'spec' (the spec's defaults, under
   * which nothing is sent ahead and memory stays within 8 MiB).
   */
  profile?: 'streaming' | 'spec'
  /**
   * Keep the chunks written (runs of whole blocks, ≥ 256 KiB at 4 KiB blocks) as they are
   * until their object is stored, instead of copying them (default false). Only for a
   * source that never changes a chunk once written, even after its write callback, as
   * Node's own readables (files, sockets, pipes, zlib) do: a source that reuses its
   * buffers would have the new bytes stored under the old bytes' CRCs.
   */
  adoptChunks?: boolean
  /**
   * A write-ahead log (docs/wal.md): every chunk is logged before its write callback, and a
   * stream that ended is published by the next writer with the same folder if the process
   * dies before its flush does. Nothing is sent ahead with a log.
   */
  wal?: WalOptions
}

/** The 'progress' event: emitted as each upload request completes (part 0's before the inode write), and once after the commit. */
export interface WriteProgress {
  /** Bytes taken in so far. */
  bytesWritten: number
  /** Body bytes of the upload requests completed so far (SegmentFile.progress). */
  uploadedBytes: number
  /** Upload requests completed so far. */
  requests: number
  /** Requests carrying bodies in flight now. */
  requestsInFlight: number
}

/** The stream's events and their arguments. */
export interface WriteStreamEvents {
  close: []
  drain: []
  error: [err: Error]
  finish: []
  flush: [timing: FlushTiming]
  pipe: [src: NodeJS.ReadableStream]
  progress: [progress: WriteProgress]
  unpipe: [src: NodeJS.ReadableStream]
}

type Listener<K extends keyof WriteStreamEvents> = (...args: WriteStreamEvents[K]) => void
// biome-ignore lint/suspicious/noExplicitAny: the catch-all overload, as node:stream's own
type AnyListener = (...args: any[]) => void
/** Any other event name: the catch-all overload does not take the events typed above. */
type Other<E> = E extends keyof WriteStreamEvents ? never : E

/**
 * Typed events: a handler of 'flush' or 'progress' (or of Node's own events) must take
 * the event's arguments; strict TypeScript rejects `on('flush', (t: string) => …)`.
 */
export interface StreamSegmentWriteStream {
  on<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  on<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  once<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  once<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  off<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  off<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  addListener<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  addListener<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  prependListener<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  prependListener<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  prependOnceListener<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  prependOnceListener<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  removeListener<K extends keyof WriteStreamEvents>(event: K, listener: Listener<K>): this
  removeListener<E extends string | symbol>(event: Other<E>, listener: AnyListener): this
  emit<K extends keyof WriteStreamEvents>(event: K, ...args: WriteStreamEvents[K]): boolean
  // biome-ignore lint/suspicious/noExplicitAny: the catch-all overload, as node:stream's own
  emit<E extends string | symbol>(event: Other<E>, ...args: any[]): boolean
}

type Callback = (err?: Error | null) => void

// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: see the interface above
export class StreamSegmentWriteStream extends Writable {
  /** The flush's timing once the stream has finished. */
  flushTiming: FlushTiming | undefined
  /** Bytes taken in so far. */
  bytesWritten = 0
  file: SegmentFile | undefined
  readonly store: ObjectStore
  private readonly settings: Partial<Settings> & WithHooks & { wal?: WalOptions }
  private committed = false
  /** `_final` has started the flush (the input ended). */
  private ending = false
  /** The flush's outcome, once `_final` started it: its error, or undefined (never rejects). */
  private flushed: Promise<unknown> | undefined
  /** The error the flush failed with by itself (a store's, not an abort's), which destroys the stream. */
  private flushError: Error | undefined
  /** The signal's error, once it aborted. */
  private abortError: Error | undefined
  /** The last 'progress' (at the commit) was emitted. */
  private progressDone = false
  private requests = 0
  private readonly adopt: boolean
  /**
   * Aborts the open's requests: Node holds `_destroy` until `_construct` has called back, so
   * an open stalled on a request would hold `destroy()` and the signal until the store gave
   * up on that request.
   */
  private readonly opening = new AbortController()

  constructor(options: WriteStreamOptions) {
    // Checked before super(): Node's Writable schedules `_construct` as soon as it is made.
    checkStreamOptions('createStreamSegmentWriteStream', options)
    const {
      url,
      store,
      signal,
      highWaterMark = 64 * 1024,
      profile = 'streaming',
      adoptChunks = false,
      wal,
      ...settings
    } = options
    checkOptionNames('createStreamSegmentWriteStream', options, WRITE_STREAM_OPTIONS, { settings: true })
    checkSettingValues(settings)
    if (profile !== 'streaming' && profile !== 'spec') {
      throw StreamSegmentError.invalidArgument(
        `createStreamSegmentWriteStream: profile ${showValue(profile)}: must be 'streaming' or 'spec'`,
      )
    }
    if (typeof adoptChunks !== 'boolean') {
      throw StreamSegmentError.invalidArgument(
        `createStreamSegmentWriteStream: adoptChunks ${showValue(adoptChunks)}: must be true or false`,
      )
    }
    // Here, not when the stream opens the file: a bad log option fails the call, not the stream.
    if (wal !== undefined) checkWalOptions(wal)
    const target = storeOf({ url, store }, 'createStreamSegmentWriteStream')
    super({ highWaterMark })
    this.store = target
    this.adopt = adoptChunks
    // A setting given as undefined is not given (as checkOptionNames takes it): spread over the
    // profile, it would replace the profile's value and leave the spec's default.
    const given = Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined))
    // Test hooks and a derived piece size (Upload's) ride under symbols, which Object.entries leaves out.
    const hooks = hooksOf(options)
    const part = (options as WithHooks)[PART_BYTES]
    this.settings = {
      ...(profile === 'streaming' ? { ...STREAMING_PROFILE, ...given } : given),
      ...(wal === undefined ? {} : { wal }),
      ...(hooks === undefined ? {} : { [TEST_HOOKS]: hooks }),
      ...(part === undefined ? {} : { [PART_BYTES]: part }),
    }
    destroyOnAbort(
      { destroy: (err) => this.abortBy(err), once: (e, l) => this.once(e, l) },
      signal,
      `write to ${this.store.url}`,
    )
  }

  /**
   * The signal aborted. Before the input ended, or once the flush is past its inode write, the
   * stream is destroyed at once. While the flush runs, its requests are aborted now, but the
   * inode write, if under way, is waited for (write/flush.ts says why): if it publishes, the
   * stream finishes as committed; otherwise it is destroyed with the abort's error.
   */
  private abortBy(err: Error): void {
    if (this.committed) return // finishing: published already
    this.abortError ??= err
    const file = this.file
    const flushed = this.flushed
    if (!this.ending || file === undefined || flushed === undefined || this.destroyed) {
      this.destroy(err)
      return
    }
    file.abort(err)
    flushed.then(() => {
      if (!this.committed) this.destroy(err)
    })
  }

  /** Where the upload stands (the 'progress' event's argument). */
  get progress(): WriteProgress {
    const { uploadedBytes, requestsInFlight } = this.file?.progress ?? { uploadedBytes: 0, requestsInFlight: 0 }
    return { bytesWritten: this.bytesWritten, uploadedBytes, requests: this.requests, requestsInFlight }
  }

  override destroy(error?: Error): this {
    if (this.file === undefined) {
      this.opening.abort(error ?? StreamSegmentError.aborted(`write to ${this.store.url}: destroyed while opening`))
    }
    return super.destroy(error)
  }

  override _construct(cb: Callback): void {
    // The open's read requests carry `opening`'s signal (the count is not used); so does the
    // file itself while a WAL's replay is published, which uploads (OPEN_SIGNAL).
    const opened = countingStore(this.store, { requests: 0, bytes: 0 }, this.opening.signal)
    openForAppend(opened.store, { ...this.settings, [OPEN_SIGNAL]: this.opening.signal }).then(
      (file) => {
        opened.stop()
        this.file = file
        // Called as each request's answer is taken, before the flush goes on: a listener that
        // sees part 0 stored runs before the inode write starts. One that throws destroys the
        // stream with its error (nothing is published unless the commit is under way), and
        // never fails the upload it was called from.
        fileState(file).uploader.onRequestDone = () => {
          this.requests++
          if (this.progressDone || this.destroyed) return
          try {
            this.emit('progress', this.progress)
          } catch (err) {
            this.destroy(err instanceof Error ? err : new Error(String(err)))
          }
        }
        cb()
      },
      (err: Error) => {
        // Aborted by destroy() or the signal: the stream ends as they say (`_destroy`), not
        // with the error of the request they cut.
        cb(this.opening.signal.aborted ? null : err)
      },
    )
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: Callback): void {
    this.take(chunk).then(() => cb(), cb)
  }

  override _writev(chunks: { chunk: Buffer }[], cb: Callback): void {
    this.takeAll(chunks).then(() => cb(), cb)
  }

  override _final(cb: Callback): void {
    const file = this.file as SegmentFile
    this.ending = true
    const logged = this.settings.wal === undefined ? Promise.resolve() : file.walCommit()
    const flush = logged
      .then(() => file.flush())
      .then((timing) => {
        this.flushTiming = timing
        this.committed = true
        return timing
      })
    this.flushed = flush.then(
      () => undefined,
      (err: unknown) => err,
    )
    flush.then(
      (timing) => {
        // After the commit, a turn later. A listener that throws here does so on its own (as
        // any emitter's): the checkpoint is published, the stream still finishes.
        process.nextTick(() => {
          this.progressDone = true
          try {
            this.emit('progress', this.progress)
            this.emit('flush', timing)
          } finally {
            cb()
          }
        })
      },
      (err: Error) => {
        if (this.abortError === undefined) this.flushError = err
        cb(err)
      },
    )
  }

  /**
   * Stops uploads at once and closes the file. What the stream ends with is what happened:
   * a flush whose inode write was under way when the destroy came is waited for, and if it
   * published, the stream closes without an error (committed: `flushTiming` is set, 'flush'
   * emitted), whatever the destroy's error; otherwise the destroy's error, or ERR_ABORTED
   * for a destroy without one once the input had ended (else pipeline() would take the
   * ended stream for a finished one): the flush's own when its inode write did not answer
   * in time, which says that whether the checkpoint was published is unknown. With a WAL, the log is emptied unless the flush failed
   * by itself (a store error): a stream destroyed or aborted is never published later.
   */
  override _destroy(err: Error | null, cb: Callback): void {
    const url = this.store.url
    const destroyed = () => StreamSegmentError.aborted(`write to ${url}: destroyed before the commit`)
    const file = this.file
    if (file === undefined) {
      // The open failed or was aborted: nothing was written.
      cb(err ?? (this.writableEnded ? destroyed() : null))
      return
    }
    // The destroy error (source, store or abort) says why.
    if (!this.committed) file.abort(err ?? StreamSegmentError.aborted(`write to ${url}: destroyed`))
    const discardWal = this.settings.wal !== undefined && !this.committed && (err === null || err !== this.flushError)
    const settled = (failed: unknown) => {
      if (this.committed) cb(null)
      else if (err !== null) cb(err)
      else if (!this.writableEnded) cb(null)
      else cb(isUnknownOutcome(failed) ? (failed as Error) : destroyed())
    }
    file
      .close({ discardWal })
      .catch(() => undefined) // the stream's own outcome is what matters
      .then(() => this.flushed)
      .then(settled)
  }

  private async take(chunk: Uint8Array): Promise<void> {
    await intake(this.file as SegmentFile, this.bytesWritten, chunk, this.adopt)
    this.bytesWritten += chunk.byteLength
  }

  private async takeAll(chunks: { chunk: Uint8Array }[]): Promise<void> {
    for (const { chunk } of chunks) await this.take(chunk)
  }
}

/**
 * The stream's one call into SegmentFile: `chunk` written at `offset`. Node's Writable has
 * turned strings into Buffers (with their encoding) and Uint8Arrays into Buffer views.
 */
function intake(file: SegmentFile, offset: number, chunk: Uint8Array, adopt: boolean): Promise<void> {
  return file.write(offset, chunk, { adopt })
}

/**
 * Opens the container's latest checkpoint (or starts one) and empties it, for a stream from
 * offset 0. With a WAL, the emptying and all that follows is one atomic group in the log.
 * A container another writer creates between the open finding none and the create is
 * opened, as if it had been there (its checkpoint is then replaced, as any other's).
 */
export async function openForAppend(
  store: ObjectStore,
  settings: Partial<Settings> & { wal?: WalOptions; [OPEN_SIGNAL]?: AbortSignal },
): Promise<SegmentFile> {
  let file: SegmentFile
  try {
    file = await SegmentFile.open(store, settings)
  } catch (err) {
    if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    file = await SegmentFile.create(store, settings).catch(async (e: unknown) => {
      if (!StreamSegmentError.is(e, 'ERR_CONFLICT')) throw e
      // Made outside a handle's call: a custom store's rejection with no Error is named here.
      const made = await hasInode(store, settings[OPEN_SIGNAL]).catch((thrown: unknown) => {
        throw requestError(thrown, 'head', store, INODE_KEY)
      })
      if (!made) throw e
      return SegmentFile.open(store, settings)
    })
  }
  try {
    if (settings.wal !== undefined) await file.walBegin()
    await file.truncate(0)
  } catch (err) {
    await file.close()
    throw err
  }
  return file
}

export function createStreamSegmentWriteStream(options: WriteStreamOptions): StreamSegmentWriteStream {
  return new StreamSegmentWriteStream(options)
}
