/**
 * `createStreamSegmentWriteStream`: a streamx Writable that writes what is piped into it
 * as a new checkpoint of a container, from offset 0 (an existing container gets a new
 * checkpoint that replaces its content).
 *
 * A thin adapter over SegmentFile: `_writev` awaits `file.write`, which holds the
 * callback back while partial segments are written, so a fast source is paused and
 * memory stays within the dirty limit (plus what the stream itself buffers:
 * `highWaterMark`, small by default). `_final` runs the flush; 'finish' therefore means
 * committed: every object and the inode are written, and `flushTiming` holds the
 * FlushTiming (also emitted as 'flush'). A source error, a store error, `destroy()` or
 * the AbortSignal aborts every request in flight and publishes nothing; the stream is
 * destroyed with a StreamSegmentError (the cause attached). Note streamx's ways:
 * `write(chunk, cb)` never calls `cb`, and `_destroy` runs after a clean end too.
 */
import { Writable } from 'streamx'
import { StreamSegmentError } from '../errors.js'
import { SegmentFile } from '../segment-file.js'
import { type Settings, STREAMING_PROFILE } from '../settings.js'
import type { ObjectStore } from '../store/types.js'
import type { FlushTiming } from '../write/flush.js'
import { destroyOnAbort, type StreamLocation, storeOf } from './options.js'

export interface WriteStreamOptions extends Partial<Settings>, StreamLocation {
  signal?: AbortSignal
  /** Bytes the stream itself may queue before the source is paused (default 64 KiB). */
  highWaterMark?: number
  /**
   * Defaults for the settings not given: 'streaming' (the default: STREAMING_PROFILE,
   * data sent ahead within a 96 MiB dirty limit) or 'spec' (the spec's defaults, under
   * which nothing is sent ahead and memory stays within 8 MiB).
   */
  profile?: 'streaming' | 'spec'
}

type Callback = (err: Error | null) => void

export class StreamSegmentWriteStream extends Writable {
  /** The flush's timing once the stream has finished. */
  flushTiming: FlushTiming | undefined
  /** Bytes taken in so far. */
  bytesWritten = 0
  file: SegmentFile | undefined
  readonly store: ObjectStore
  private readonly settings: Partial<Settings>
  private committed = false

  constructor(options: WriteStreamOptions) {
    const { url, store, signal, highWaterMark = 64 * 1024, profile = 'streaming', ...settings } = options
    super({ highWaterMark })
    if (profile !== 'streaming' && profile !== 'spec') {
      throw StreamSegmentError.invalidArgument(`profile ${JSON.stringify(profile)}: must be 'streaming' or 'spec'`)
    }
    this.store = storeOf({ url, store }, 'createStreamSegmentWriteStream')
    this.settings = profile === 'streaming' ? { ...STREAMING_PROFILE, ...settings } : settings
    destroyOnAbort(this, signal, `write to ${this.store.url}`)
  }

  override _open(cb: Callback): void {
    openForAppend(this.store, this.settings).then((file) => {
      this.file = file
      cb(null)
    }, cb)
  }

  override _writev(batch: Uint8Array[], cb: Callback): void {
    this.writeAll(batch).then(() => cb(null), cb)
  }

  override _final(cb: Callback): void {
    ;(this.file as SegmentFile).flush().then((timing) => {
      this.flushTiming = timing
      this.committed = true
      ;(this as unknown as NodeJS.EventEmitter).emit('flush', timing)
      cb(null)
    }, cb)
  }

  override _predestroy(): void {
    // Stop uploads now; the destroy error (source, store or abort) says why.
    if (!this.committed) this.file?.abort(this.destroyError())
  }

  override _destroy(cb: Callback): void {
    const file = this.file
    if (file === undefined) {
      cb(null)
      return
    }
    if (!this.committed) file.abort(this.destroyError())
    file.close().then(
      () => cb(null),
      () => cb(null), // the stream's own error is what matters
    )
  }

  /** The error the stream is being destroyed with (streamx keeps it in its state). */
  private destroyError(): unknown {
    return (this as unknown as { _writableState?: { error: unknown } | null })._writableState?.error ?? undefined
  }

  private async writeAll(batch: Uint8Array[]): Promise<void> {
    const file = this.file as SegmentFile
    for (const chunk of batch) {
      if (!(chunk instanceof Uint8Array)) {
        throw StreamSegmentError.invalidArgument(`write stream takes Buffers or Uint8Arrays, got ${typeof chunk}`)
      }
      await file.write(this.bytesWritten, chunk, { adopt: true })
      this.bytesWritten += chunk.byteLength
    }
  }
}

declare module 'streamx' {
  interface Writable {
    _writableState?: { error: Error | null } | null
    _open(cb: Callback): void
    _predestroy(): void
    _destroy(cb: Callback): void
  }
}

/** Opens the container's latest checkpoint (or starts one) and empties it, for a stream from offset 0. */
export async function openForAppend(store: ObjectStore, settings: Partial<Settings>): Promise<SegmentFile> {
  let file: SegmentFile
  try {
    file = await SegmentFile.open(store, settings)
  } catch (err) {
    if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    file = await SegmentFile.create(store, settings)
  }
  await file.truncate(0)
  return file
}

export function createStreamSegmentWriteStream(options: WriteStreamOptions): StreamSegmentWriteStream {
  return new StreamSegmentWriteStream(options)
}
